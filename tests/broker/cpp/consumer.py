"""Run with the real RocketMQ C++ client's venv: push-consume until N messages arrived, print them.

PushConsumer.shutdown() segfaults in this client build, so the process ends with os._exit.
"""

import os
import sys
import threading
import time

from rocketmq.client import PushConsumer

ns, topic, n, expr, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
got = []
lock = threading.Lock()  # the callback runs on several client threads


def on_message(msg):
    with lock:
        got.append(msg.body)
        print("GOT", msg.body.decode(), msg.tags.decode(), msg.keys.decode(), flush=True)


c = PushConsumer(group)
c.set_namesrv_addr(ns)
c.subscribe(topic, on_message, expr)
c.start()
deadline = time.time() + 40
while len(got) < n and time.time() < deadline:
    time.sleep(0.05)
print("DONE", len(got), flush=True)
time.sleep(float(os.environ.get("LINGER_S", "0")))  # let it commit offsets (every 5 s)
os._exit(0)
