# One image for every role: NameServer, broker and the tools (mqadmin, mqbench).
# Stage 1 builds wheels; stage 2 installs them on a clean slim base, so no build tools remain.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY remoting ./remoting
COPY store ./store
COPY namesrv ./namesrv
COPY broker ./broker
COPY client ./client
COPY spark_connector ./spark_connector
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 rocketmq
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY conf /opt/rocketmq/conf
USER rocketmq
WORKDIR /home/rocketmq
# NameServer, broker (listenPort and HA port).
EXPOSE 9876 10909 10911 10912
CMD ["mqnamesrv", "-c", "/opt/rocketmq/conf/namesrv.conf"]
