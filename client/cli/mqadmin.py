"""`mqadmin`: RocketMQ's admin tool (subcommand names and flags as in RocketMQ 4.x).

Every subcommand takes `-n ADDR` (else $NAMESRV_ADDR). Listings print aligned tables, or JSON
with `--json`. Failures print one line to stderr and exit 1 (usage errors exit 2); no tracebacks
unless RMQ_DEBUG=1.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import click

from remoting.body import ConsumeMessageDirectlyResult, ConsumerRunningInfo
from remoting.log import configure_logging
from remoting.loop import run as run_loop
from remoting.message import MessageExt, PermName
from remoting.version import version_desc

from ..admin import Admin, to_jsonable
from ..config import NAMESRV_ADDR_ENV, parse_namesrv_addr
from ..errors import MQBrokerError, MQClientError, RemotingError

EXIT_ERROR = 1


class CommandError(click.ClickException):
    exit_code = EXIT_ERROR

    def show(self, file: Any = None) -> None:
        click.echo(f"mqadmin: {self.format_message()}", err=True)


# ---------------------------------------------------------------------- helpers


def _namesrv(addr: str | None) -> str:
    value = addr or os.environ.get(NAMESRV_ADDR_ENV)
    if not value:
        raise CommandError(f"-n or {NAMESRV_ADDR_ENV} required")
    try:
        parse_namesrv_addr(value)
    except MQClientError as e:
        raise CommandError(str(e)) from None
    return value


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, MQClientError | MQBrokerError | RemotingError):
        return text
    return f"{type(e).__name__}: {text}"


def run_admin(namesrv_addr: str | None, fn: Callable[[Admin], Awaitable[Any]]) -> Any:
    """Run fn(admin) on a fresh event loop; client errors become one-line CommandErrors."""
    addr = _namesrv(namesrv_addr)

    async def go() -> Any:
        async with Admin(addr) as admin:
            return await fn(admin)

    try:
        return run_loop(go())
    except click.ClickException:
        raise
    except (MQClientError, MQBrokerError, RemotingError, ValueError, OSError) as e:
        if os.environ.get("RMQ_DEBUG"):
            raise
        raise CommandError(_one_line(e)) from None


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned columns, widths fitted to the content (RocketMQ puts '#' before each header)."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(to_jsonable(obj), indent=2, sort_keys=False, default=str, ensure_ascii=False))


def fmt_ts(ms: int | None) -> str:
    if not ms or ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000.0).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def parse_timestamp(value: str) -> int:
    """'now', epoch milliseconds, or yyyy-MM-dd#HH:mm:ss:SSS (local time), as resetOffsetByTime takes."""
    v = value.strip()
    if v == "now":
        return int(time.time() * 1000)
    if v.lstrip("-").isdigit():
        return int(v)
    for fmt in ("%Y-%m-%d#%H:%M:%S:%f", "%Y-%m-%d#%H:%M:%S"):
        try:
            return int(dt.datetime.strptime(v, fmt).timestamp() * 1000)
        except ValueError:
            continue
    raise CommandError(f"bad timestamp {value!r}: use now, milliseconds, or yyyy-MM-dd#HH:mm:ss:SSS")


def parse_bool(value: str | None, name: str) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise CommandError(f"bad value {value!r} for {name}: use true or false")


def body_text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + body.hex()


def echo_message(m: MessageExt) -> None:
    """The fields RocketMQ's printMsg shows."""
    rows = [
        ("OffsetID", m.msg_id),
        ("Topic", m.topic),
        ("Tags", f"[{m.tags}]" if m.tags else "[null]"),
        ("Keys", f"[{m.keys}]" if m.keys else "[null]"),
        ("Queue ID", m.queue_id),
        ("Queue Offset", m.queue_offset),
        ("CommitLog Offset", m.commit_log_offset),
        ("Reconsume Times", m.reconsume_times),
        ("Born Timestamp", fmt_ts(m.born_timestamp)),
        ("Store Timestamp", fmt_ts(m.store_timestamp)),
        ("Born Host", f"{m.born_host[0]}:{m.born_host[1]}"),
        ("Store Host", f"{m.store_host[0]}:{m.store_host[1]}"),
        ("System Flag", m.sys_flag),
        ("Properties", m.properties),
        ("Message Body", body_text(m.body)),
    ]
    for k, v in rows:
        click.echo(f"{k + ':':<20}{v}")


def common(fn: Callable[..., Any]) -> Callable[..., Any]:
    """-n on every subcommand."""
    return click.option(
        "-n",
        "--namesrvAddr",
        "namesrv_addr",
        default=None,
        help="NameServer address list, eg: 192.168.0.1:9876;192.168.0.2:9876",
    )(fn)


def json_opt(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--json", "as_json", is_flag=True, default=False, help="Print JSON instead of a table."
    )(fn)


# ---------------------------------------------------------------------- the group


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """RocketMQ admin tool: mqadmin SUBCOMMAND [-n ADDR] ..."""


# ---------------------------------------------------------------------- topics


@cli.command("updateTopic")
@common
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="create topic to which broker")
@click.option("-c", "--clusterName", "cluster", default=None, help="create topic to which cluster")
@click.option("-r", "--readQueueNums", "read_queue_nums", type=int, default=8, show_default=True)
@click.option("-w", "--writeQueueNums", "write_queue_nums", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=int, default=6, show_default=True, help="2:W 4:R 6:RW")
@click.option("-o", "--order", default=None, help="set topic's order (true|false)")
def update_topic(
    namesrv_addr: str | None,
    topic: str,
    broker_addr: str | None,
    cluster: str | None,
    read_queue_nums: int,
    write_queue_nums: int,
    perm: int,
    order: str | None,
) -> int:
    """Create or update a topic on a broker (-b) or every master of a cluster (-c)."""
    if not broker_addr and not cluster:
        raise CommandError("updateTopic needs -b brokerAddr or -c clusterName")
    is_order = bool(parse_bool(order, "-o"))
    addrs = run_admin(
        namesrv_addr,
        lambda a: a.create_topic(
            topic,
            broker_addr=broker_addr,
            cluster=None if broker_addr else cluster,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            order=is_order,
        ),
    )
    for addr in addrs:
        click.echo(f"create topic to {addr} success.")
    click.echo(
        f"TopicConfig [topicName={topic}, readQueueNums={read_queue_nums}, writeQueueNums={write_queue_nums}, "
        f"perm={PermName.perm2string(perm)}, topicFilterType=SINGLE_TAG, topicSysFlag=0, order={str(is_order).lower()}]"
    )
    return 0


@cli.command("deleteTopic")
@common
@click.option("-t", "--topic", required=True)
@click.option("-c", "--clusterName", "cluster", required=True, help="delete topic from which cluster")
def delete_topic(namesrv_addr: str | None, topic: str, cluster: str) -> int:
    """Delete a topic from a cluster's brokers and from the NameServers."""
    run_admin(namesrv_addr, lambda a: a.delete_topic(topic, cluster))
    click.echo(f"delete topic [{topic}] from cluster [{cluster}] success.")
    click.echo(f"delete topic [{topic}] from NameServer success.")
    return 0


@cli.command("topicList")
@common
@click.option(
    "-c",
    "--clusterModel",
    "cluster_model",
    is_flag=True,
    default=False,
    help="show cluster and consumer groups",
)
@json_opt
def topic_list(namesrv_addr: str | None, cluster_model: bool, as_json: bool) -> int:
    """All topics known to the NameServer."""
    if cluster_model:
        rows = run_admin(namesrv_addr, lambda a: a.topic_cluster_list())
        if as_json:
            echo_json([{"cluster": c, "topic": t, "consumerGroups": g} for c, t, g in rows])
        else:
            echo_table(
                ["#Cluster Name", "#Topic", "#Consumer Group"],
                [(c, t, ",".join(g) or "-") for c, t, g in rows],
            )
        return 0
    topics = run_admin(namesrv_addr, lambda a: a.topic_list())
    if as_json:
        echo_json(topics)
    else:
        for t in topics:
            click.echo(t)
    return 0


@cli.command("topicRoute")
@common
@click.option("-t", "--topic", required=True)
@json_opt
def topic_route(namesrv_addr: str | None, topic: str, as_json: bool) -> int:
    """The topic's route (brokers and queues) as the NameServer has it (JSON, like RocketMQ)."""
    route = run_admin(namesrv_addr, lambda a: a.topic_route(topic))
    echo_json(route)
    return 0


@cli.command("topicClusterList")
@common
@click.option("-t", "--topic", required=True)
@json_opt
def topic_cluster_list(namesrv_addr: str | None, topic: str, as_json: bool) -> int:
    """The clusters whose brokers hold a topic, one a line."""
    clusters = run_admin(namesrv_addr, lambda a: a.topic_clusters(topic))
    if as_json:
        echo_json(clusters)
        return 0
    for c in clusters:
        click.echo(c)
    return 0


@cli.command("topicStatus")
@common
@click.option("-t", "--topic", required=True)
@json_opt
def topic_status(namesrv_addr: str | None, topic: str, as_json: bool) -> int:
    """Min/max offset and last update time of every queue of a topic."""
    rows = run_admin(namesrv_addr, lambda a: a.topic_status(topic))
    if as_json:
        echo_json(rows)
        return 0
    echo_table(
        ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"],
        [
            (
                r.queue.broker_name,
                r.queue.queue_id,
                r.min_offset,
                r.max_offset,
                fmt_ts(r.last_update_timestamp),
            )
            for r in rows
        ],
    )
    return 0


# ---------------------------------------------------------------------- cluster and brokers


@cli.command("clusterList")
@common
@json_opt
def cluster_list(namesrv_addr: str | None, as_json: bool) -> int:
    """Clusters, their brokers, and each broker's load."""

    async def go(a: Admin) -> list[dict[str, Any]]:
        brokers = await a.cluster_list()

        async def stats(addr: str) -> dict[str, str]:
            try:
                return await a.broker_runtime_info(addr)
            except (MQBrokerError, RemotingError):
                return {}

        infos = await asyncio.gather(*(stats(b.addr) for b in brokers))
        out = []
        now = time.time() * 1000
        for b, kv in zip(brokers, infos, strict=True):

            def first(key: str, kv: dict[str, str] = kv) -> float:
                try:
                    return float(kv.get(key, "0").split(" ")[0])
                except ValueError:
                    return 0.0

            earliest = kv.get("earliestMessageTimeStamp")
            hour = (
                (now - int(earliest)) / 3_600_000
                if earliest and earliest.lstrip("-").isdigit() and int(earliest) > 0
                else 0.0
            )
            try:
                space = float(kv.get("commitLogDiskRatio", "0") or 0)
            except ValueError:
                space = 0.0
            out.append(
                {
                    "cluster": b.cluster,
                    "brokerName": b.broker_name,
                    "brokerId": b.broker_id,
                    "addr": b.addr,
                    "version": kv.get("brokerVersionDesc", ""),
                    "inTps": first("putTps"),
                    "outTps": first("getTransferedTps"),
                    "pageCacheWaitMs": kv.get("pageCacheLockTimeMills", ""),
                    "hours": round(hour, 2),
                    "space": round(space, 4),
                    "reachable": bool(kv),
                }
            )
        return out

    rows = run_admin(namesrv_addr, go)
    if as_json:
        echo_json(rows)
        return 0
    echo_table(
        [
            "#Cluster Name",
            "#Broker Name",
            "#BID",
            "#Addr",
            "#Version",
            "#InTPS(LOAD)",
            "#OutTPS(LOAD)",
            "#PCWait(ms)",
            "#Hour",
            "#SPACE",
        ],
        [
            (
                r["cluster"],
                r["brokerName"],
                r["brokerId"],
                r["addr"],
                r["version"] or ("-" if r["reachable"] else "unreachable"),
                f"{r['inTps']:.2f}",
                f"{r['outTps']:.2f}",
                r["pageCacheWaitMs"] or "-",
                f"{r['hours']:.2f}",
                f"{r['space']:.4f}",
            )
            for r in rows
        ],
    )
    return 0


@cli.command("brokerStatus")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address")
@click.option("-c", "--clusterName", "cluster", default=None, help="every broker of a cluster")
@json_opt
def broker_status(
    namesrv_addr: str | None, broker_addr: str | None, cluster: str | None, as_json: bool
) -> int:
    """A broker's runtime statistics (GET_BROKER_RUNTIME_INFO)."""
    if not broker_addr and not cluster:
        raise CommandError("brokerStatus needs -b brokerAddr or -c clusterName")

    async def go(a: Admin) -> dict[str, dict[str, str]]:
        addrs = [broker_addr] if broker_addr else list((await a.master_addrs(cluster or "")).values())
        return {addr: await a.broker_runtime_info(addr) for addr in addrs if addr}

    result = run_admin(namesrv_addr, go)
    if as_json:
        echo_json(result if cluster else next(iter(result.values())))
        return 0
    for addr, kv in result.items():
        for k in sorted(kv):
            prefix = f"{addr:<22}  " if cluster else ""
            click.echo(f"{prefix}{k:<32}: {kv[k]}")
    return 0


@cli.command("getBrokerConfig")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
@json_opt
def get_broker_config(
    namesrv_addr: str | None, broker_addr: str | None, cluster: str | None, as_json: bool
) -> int:
    """A broker's configuration (every master of a cluster with -c)."""
    if not broker_addr and not cluster:
        raise CommandError("getBrokerConfig needs -b brokerAddr or -c clusterName")

    async def go(a: Admin) -> dict[str, dict[str, str]]:
        addrs = [broker_addr] if broker_addr else list((await a.master_addrs(cluster or "")).values())
        return {addr: await a.get_broker_config(addr) for addr in addrs if addr}

    result = run_admin(namesrv_addr, go)
    if as_json:
        echo_json(result)
        return 0
    for addr, props in result.items():
        click.echo(f"============{addr}============")
        for k in sorted(props):
            click.echo(f"{k:<50}=  {props[k]}")
    return 0


@cli.command("updateBrokerConfig")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
def update_broker_config(
    namesrv_addr: str | None, broker_addr: str | None, cluster: str | None, key: str, value: str
) -> int:
    """Change one broker config key at runtime."""
    if not broker_addr and not cluster:
        raise CommandError("updateBrokerConfig needs -b brokerAddr or -c clusterName")
    addrs = run_admin(
        namesrv_addr, lambda a: a.update_broker_config(key, value, broker_addr=broker_addr, cluster=cluster)
    )
    for addr in addrs:
        click.echo(f"update broker config success, {addr}")
    return 0


@cli.command("wipeWritePerm")
@common
@click.option("-b", "--brokerName", "broker_name", required=True)
def wipe_write_perm(namesrv_addr: str | None, broker_name: str) -> int:
    """Stop producers from writing to a broker (on every NameServer)."""
    return _change_write_perm(namesrv_addr, broker_name, "wipe")


def _change_write_perm(namesrv_addr: str | None, broker_name: str, action: str) -> int:
    method = "wipe_write_perm" if action == "wipe" else "add_write_perm"
    result = run_admin(namesrv_addr, lambda a: getattr(a, method)(broker_name))
    for addr, n in result.items():
        click.echo(f"{action} write perm of broker[{broker_name}] in name server[{addr}] OK, {n}")
    return 0


@cli.command("addWritePerm")
@common
@click.option("-b", "--brokerName", "broker_name", required=True)
def add_write_perm(namesrv_addr: str | None, broker_name: str) -> int:
    """Let producers write to a broker again (on every NameServer)."""
    return _change_write_perm(namesrv_addr, broker_name, "add")


def _clean_on_brokers(
    namesrv_addr: str | None, broker_addr: str | None, cluster: str | None, method: str, as_json: bool
) -> int:
    """cleanExpiredCQ / cleanUnusedTopic: one broker (-b), every broker of a cluster (-c), else of every
    cluster (as RocketMQ's tool)."""
    addrs = run_admin(namesrv_addr, lambda a: getattr(a, method)(broker_addr=broker_addr, cluster=cluster))
    if as_json:
        echo_json({"success": True, "brokers": addrs})
        return 0
    for addr in addrs:
        click.echo(f"{addr}: success")
    return 0


def on_brokers_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the commands run on brokers (_clean_on_brokers): -n, -b, -c and --json."""
    fn = json_opt(fn)
    fn = click.option("-c", "--cluster", "cluster", default=None,
                      help="every broker of this cluster (default: every cluster)")(fn)
    fn = click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address")(fn)
    return common(fn)


@cli.command("cleanExpiredCQ")
@on_brokers_options
def clean_expired_cq(namesrv_addr: str | None, broker_addr: str | None, cluster: str | None, as_json: bool) -> int:
    """Drop the consume queues whose messages the commit log no longer holds (CLEAN_EXPIRED_CONSUMEQUEUE)."""
    return _clean_on_brokers(namesrv_addr, broker_addr, cluster, "clean_expired_consume_queue", as_json)


@cli.command("cleanUnusedTopic")
@on_brokers_options
def clean_unused_topic(namesrv_addr: str | None, broker_addr: str | None, cluster: str | None, as_json: bool) -> int:
    """Drop the consume queues of topics a broker has no config for (CLEAN_UNUSED_TOPIC)."""
    return _clean_on_brokers(namesrv_addr, broker_addr, cluster, "clean_unused_topic", as_json)


@cli.command("resumeCheckHalfMessage")
@common
@click.option("-i", "--msgId", "msg_id", required=True,
              help="offset msg id of the transaction's message (e.g. its copy in TRANS_CHECK_MAX_TIME_TOPIC)")
def resume_check_half_message(namesrv_addr: str | None, msg_id: str) -> int:
    """Ask a transaction's producer again about a message whose checks were given up (RESUME_CHECK_HALF_MESSAGE)."""
    addr = run_admin(namesrv_addr, lambda a: a.resume_check_half_message(msg_id))
    click.echo(f"{addr}: success")
    return 0


@cli.command("deleteExpiredCommitLog")
@on_brokers_options
def delete_expired_commit_log(namesrv_addr: str | None, broker_addr: str | None, cluster: str | None,
                              as_json: bool) -> int:
    """Have brokers delete their commit log files older than fileReservedTime now, in their next cleaning
    rounds, rather than at deleteWhen's hour (DELETE_EXPIRED_COMMITLOG)."""
    return _clean_on_brokers(namesrv_addr, broker_addr, cluster, "delete_expired_commit_log", as_json)


# ---------------------------------------------------------------------- groups and consumers


@cli.command("updateSubGroup")
@common
@click.option("-g", "--groupName", "group", required=True)
@click.option("-b", "--brokerAddr", "broker_addr", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
@click.option("-s", "--consumeEnable", "consume_enable", default=None)
@click.option("-m", "--consumeFromMinEnable", "consume_from_min", default=None)
@click.option("-d", "--consumeBroadcastEnable", "broadcast", default=None)
@click.option("-q", "--retryQueueNums", "retry_queue_nums", type=int, default=1, show_default=True)
@click.option("-r", "--retryMaxTimes", "retry_max_times", type=int, default=16, show_default=True)
@click.option("-i", "--brokerId", "broker_id", type=int, default=0, show_default=True)
@click.option("-w", "--whichBrokerWhenConsumeSlowly", "slowly", type=int, default=1, show_default=True)
@click.option("-a", "--notifyConsumerIdsChanged", "notify", default=None)
def update_sub_group(
    namesrv_addr: str | None,
    group: str,
    broker_addr: str | None,
    cluster: str | None,
    consume_enable: str | None,
    consume_from_min: str | None,
    broadcast: str | None,
    retry_queue_nums: int,
    retry_max_times: int,
    broker_id: int,
    slowly: int,
    notify: str | None,
) -> int:
    """Create or update a subscription (consumer) group on a broker or a cluster."""
    if not broker_addr and not cluster:
        raise CommandError("updateSubGroup needs -b brokerAddr or -c clusterName")
    ce = parse_bool(consume_enable, "-s")
    cm = parse_bool(consume_from_min, "-m")
    bc = parse_bool(broadcast, "-d")
    nt = parse_bool(notify, "-a")
    addrs = run_admin(
        namesrv_addr,
        lambda a: a.create_subscription_group(
            group,
            broker_addr=broker_addr,
            cluster=None if broker_addr else cluster,
            consume_enable=True if ce is None else ce,
            consume_from_min_enable=False if cm is None else cm,
            consume_broadcast_enable=False if bc is None else bc,
            retry_queue_nums=retry_queue_nums,
            retry_max_times=retry_max_times,
            broker_id=broker_id,
            which_broker_when_consume_slowly=slowly,
            notify_consumer_ids_changed_enable=True if nt is None else nt,
        ),
    )
    for addr in addrs:
        click.echo(f"create subscription group to {addr} success.")
    return 0


@cli.command("deleteSubGroup")
@common
@click.option("-g", "--groupName", "group", required=True)
@click.option("-b", "--brokerAddr", "broker_addr", default=None)
@click.option("-c", "--clusterName", "cluster", default=None)
@click.option("-r", "--removeOffset", "remove_offset", default=None)
def delete_sub_group(
    namesrv_addr: str | None,
    group: str,
    broker_addr: str | None,
    cluster: str | None,
    remove_offset: str | None,
) -> int:
    """Delete a subscription group from a broker or a cluster."""
    if not broker_addr and not cluster:
        raise CommandError("deleteSubGroup needs -b brokerAddr or -c clusterName")
    ro = bool(parse_bool(remove_offset, "-r"))
    addrs = run_admin(
        namesrv_addr,
        lambda a: a.delete_subscription_group(
            group, broker_addr=broker_addr, cluster=None if broker_addr else cluster, remove_offset=ro
        ),
    )
    for addr in addrs:
        click.echo(f"delete subscription group [{group}] from broker [{addr}] success.")
    return 0


@cli.command("consumerProgress")
@common
@click.option("-g", "--groupName", "group", default=None)
@click.option("-t", "--topicName", "topic", default=None, help="only this topic")
@click.option("-s", "--showClientIP", "show_client_ip", default=None, help="accepted for compatibility")
@json_opt
def consumer_progress(
    namesrv_addr: str | None, group: str | None, topic: str | None, show_client_ip: str | None, as_json: bool
) -> int:
    """A group's progress per queue (broker offset, consumer offset, lag), or every group's totals."""
    if group:
        p = run_admin(namesrv_addr, lambda a: a.consumer_progress(group, topic))
        if as_json:
            echo_json(p)
            return 0
        echo_table(
            ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff", "#LastTime"],
            [
                (
                    q.queue.topic,
                    q.queue.broker_name,
                    q.queue.queue_id,
                    q.broker_offset,
                    q.consumer_offset,
                    q.diff,
                    fmt_ts(q.last_timestamp),
                )
                for q in p.queues
            ],
        )
        click.echo("")
        click.echo(f"Consume TPS: {p.consume_tps:.2f}")
        click.echo(f"Diff Total: {p.diff_total}")
        return 0
    rows = run_admin(namesrv_addr, lambda a: a.all_consumer_progress())
    if as_json:
        echo_json(rows)
        return 0
    echo_table(
        ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"],
        [
            (
                r.group,
                r.count,
                r.version,
                r.consume_type,
                r.message_model,
                f"{r.consume_tps:.2f}",
                r.diff_total,
            )
            for r in rows
        ],
    )
    return 0


@cli.command("consumerConnection")
@common
@click.option("-g", "--consumerGroup", "group", required=True)
@json_opt
def consumer_connection(namesrv_addr: str | None, group: str, as_json: bool) -> int:
    """Consumers connected for a group, and its subscriptions."""
    conn = run_admin(namesrv_addr, lambda a: a.consumer_connection(group))
    if as_json:
        echo_json(conn)
        return 0
    echo_table(
        ["#", "#ClientId", "#ClientAddr", "#Language", "#Version"],
        [
            (i + 1, c.client_id, c.client_addr, c.language, version_desc(c.version))
            for i, c in enumerate(conn.connection_set)
        ],
    )
    click.echo("")
    click.echo("Below is subscription:")
    echo_table(
        ["#", "#Topic", "#SubExpression"],
        [(i + 1, t, s.sub_string) for i, (t, s) in enumerate(sorted(conn.subscription_table.items()))],
    )
    click.echo("")
    click.echo(f"ConsumeType: {conn.consume_type}")
    click.echo(f"MessageModel: {conn.message_model}")
    click.echo(f"ConsumeFromWhere: {conn.consume_from_where}")
    return 0


@cli.command("producerConnection")
@common
@click.option("-g", "--producerGroup", "group", required=True)
@click.option("-t", "--topic", required=True, help="a topic the group sends to (its brokers are asked)")
@json_opt
def producer_connection(namesrv_addr: str | None, group: str, topic: str, as_json: bool) -> int:
    """Producers connected for a group, on the brokers of a topic."""
    conn = run_admin(namesrv_addr, lambda a: a.producer_connection(group, topic))
    if as_json:
        echo_json(conn)
        return 0
    echo_table(
        ["#", "#ClientId", "#ClientAddr", "#Language", "#Version"],
        [(i + 1, c.client_id, c.client_addr, c.language, version_desc(c.version))
         for i, c in enumerate(conn.connection_set)],
    )
    return 0


@cli.command("producer")
@common
@click.option("-b", "--broker", "broker_addr", required=True, help="broker address")
@json_opt
def producer(namesrv_addr: str | None, broker_addr: str, as_json: bool) -> int:
    """Every producer group connected to one broker, and its clients."""
    info = run_admin(namesrv_addr, lambda a: a.all_producer_info(broker_addr))
    if as_json:
        echo_json(info)
        return 0
    echo_table(
        ["#ProducerGroup", "#ClientId", "#RemoteIP", "#Language", "#Version", "#LastUpdateTime"],
        [
            (group, p.client_id, p.remote_ip, p.language, version_desc(p.version), fmt_ts(p.last_update_timestamp))
            for group, producers in sorted(info.data.items())
            for p in sorted(producers, key=lambda p: p.client_id)
        ],
    )
    return 0


@cli.command("brokerConsumeStats")
@common
@click.option("-b", "--brokerAddr", "broker_addr", required=True)
@click.option("-t", "--timeoutMillis", "timeout_ms", type=int, default=50000, show_default=True)
@click.option("-l", "--level", type=int, default=0, show_default=True, help="only queues lagging at least this much")
@click.option("-o", "--order", default="false", show_default=True, help="order topics only (true|false)")
@json_opt
def broker_consume_stats(
    namesrv_addr: str | None, broker_addr: str, timeout_ms: int, level: int, order: str, as_json: bool
) -> int:
    """Every consumer group's progress per queue on one broker, and its total lag."""
    is_order = bool(parse_bool(order, "-o"))
    stats = run_admin(namesrv_addr, lambda a: a.broker_consume_stats(broker_addr, is_order=is_order, timeout_ms=timeout_ms))
    queues = [
        (group, mq, w)
        for by_group in stats.consume_stats_list
        for group, per_topic in by_group.items()
        for cs in per_topic
        for mq, w in sorted(cs.offset_table.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id))
        if w.broker_offset - w.consumer_offset >= level
    ]
    if as_json:
        echo_json({
            "broker_addr": stats.broker_addr,
            "total_diff": stats.total_diff,
            "queues": [
                {"group": g, "queue": {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id},
                 "broker_offset": w.broker_offset, "consumer_offset": w.consumer_offset,
                 "diff": w.broker_offset - w.consumer_offset, "last_timestamp": w.last_timestamp}
                for g, mq, w in queues
            ],
        })
        return 0
    rows = [
        (mq.topic, g, mq.broker_name, mq.queue_id, w.broker_offset, w.consumer_offset, w.broker_offset - w.consumer_offset,
         fmt_ts(w.last_timestamp) if w.last_timestamp > 0 else "N/A")
        for g, mq, w in queues
    ]
    echo_table(["#Topic", "#Group", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff",
                "#LastTime"], rows)
    click.echo("")
    click.echo(f"Diff Total: {stats.total_diff}")
    return 0


@cli.command("allocateMQ")
@common
@click.option("-t", "--topic", required=True)
@click.option("-i", "--ipList", "ip_list", required=True, help="consumer ids (e.g. IPs), comma separated")
def allocate_mq(namesrv_addr: str | None, topic: str, ip_list: str) -> int:
    """How AllocateMessageQueueAveragely shares a topic's queues among consumers with these ids (JSON)."""
    from ..consumer.allocate import AllocateMessageQueueAveragely

    ids = [i.strip() for i in ip_list.split(",") if i.strip()]
    if not ids:
        raise CommandError("-i needs at least one id")
    queues = sorted(run_admin(namesrv_addr, lambda a: a.topic_queues(topic)))
    strategy = AllocateMessageQueueAveragely()
    result = {cid: strategy.allocate("allocateMQ", cid, queues, ids) for cid in ids}
    echo_json({"result": result})
    return 0


@cli.command("consumerStatus")
@common
@click.option("-g", "--consumerGroup", "group", required=True)
@click.option("-i", "--clientId", "client_id", default=None, help="one client: its whole running info")
@click.option("-s", "--jstack", default="false", show_default=True, help="ask Java clients for a thread dump (true|false)")
@json_opt
def consumer_status(namesrv_addr: str | None, group: str, client_id: str | None, jstack: str, as_json: bool) -> int:
    """What a group's consumer clients report of themselves (ConsumerRunningInfo), and whether they agree."""
    dump = bool(parse_bool(jstack, "-s"))

    async def gather(a: Admin) -> dict[str, ConsumerRunningInfo]:
        ids = [client_id] if client_id else await a.consumer_ids(group)
        return {cid: await a.consumer_running_info(group, cid, jstack=dump) for cid in ids}

    infos = run_admin(namesrv_addr, gather)
    if as_json:
        echo_json(infos)
        return 0
    if client_id:
        echo_running_info(infos[client_id])
        return 0
    echo_table(["#", "#ClientId", "#Version", "#Language", "#Subscriptions"], [
        (i + 1, cid, info.properties.get("PROP_CLIENT_VERSION", "-"), info.properties.get("PROP_LANGUAGE", "JAVA"),
         len(info.subscription_set))
        for i, (cid, info) in enumerate(sorted(infos.items()))
    ])
    subs = {tuple(sorted((sd.topic, sd.sub_string, sd.expression_type) for sd in info.subscription_set))
            for info in infos.values()}
    click.echo("")
    click.echo("Same subscription in the same group of consumer" if len(subs) <= 1
               else "WARN: Different subscription in the same group of consumer!!!")
    return 0


def echo_running_info(info: ConsumerRunningInfo) -> None:
    """One client's ConsumerRunningInfo, in the sections RocketMQ's consumerStatus -i prints."""
    for k, v in sorted(info.properties.items()):
        click.echo(f"{k:<40}: {v}")
    click.echo("")
    click.echo("Subscriptions:")
    echo_table(["#Topic", "#SubExpression", "#Type"],
               [(sd.topic, sd.sub_string, sd.expression_type) for sd in info.subscription_set])
    click.echo("")
    click.echo("Queues:")
    echo_table(["#Topic", "#Broker Name", "#QID", "#Consumer Offset", "#Cached", "#Cached Offsets", "#Locked",
                "#Last Pull", "#Last Consume"], [
        (mq.topic, mq.broker_name, mq.queue_id, pq.commit_offset, pq.cached_msg_count,
         f"{pq.cached_msg_min_offset}-{pq.cached_msg_max_offset}" if pq.cached_msg_count else "-",
         "dropped" if pq.droped else str(pq.locked).lower(), fmt_ts(pq.last_pull_timestamp),
         fmt_ts(pq.last_consume_timestamp))
        for mq, pq in sorted(info.mq_table.items(), key=lambda item: (item[0].topic, item[0].broker_name,
                                                                      item[0].queue_id))
    ])
    click.echo("")
    click.echo("RT (ms) and TPS over the last minute, failed messages over the last hour:")
    echo_table(["#Topic", "#Pull RT", "#Pull TPS", "#Consume RT", "#ConsumeOK TPS", "#ConsumeFailed TPS",
                "#ConsumeFailedMsgsInHour"], [
        (topic, f"{st.pull_rt:.2f}", f"{st.pull_tps:.2f}", f"{st.consume_rt:.2f}", f"{st.consume_ok_tps:.2f}",
         f"{st.consume_failed_tps:.2f}", st.consume_failed_msgs)
        for topic, st in sorted(info.status_table.items())
    ])
    if info.jstack:
        click.echo("")
        click.echo(info.jstack)


@cli.command("statsAll")
@common
@click.option("-a", "--activeTopic", "active", is_flag=True, help="only topics with messages in or out over the last day")
@click.option("-t", "--topic", default=None, help="one topic")
@json_opt
def stats_all(namesrv_addr: str | None, active: bool, topic: str | None, as_json: bool) -> int:
    """Every topic's traffic: messages a second in and, per consuming group, out over the last minute, the
    last day's counts, and each group's backlog (RocketMQ's statsAll)."""
    rows = run_admin(namesrv_addr, lambda a: a.stats_all(topic, active_only=active))
    if as_json:
        echo_json(rows)
        return 0
    echo_table(["#Topic", "#Consumer Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour"], [
        (r.topic, r.group or "", r.accumulation, f"{r.in_tps:.2f}", f"{r.out_tps:.2f}" if r.group else "",
         r.in_msg_24h, r.out_msg_24h if r.group else "NO_CONSUMER")
        for r in rows
    ])
    return 0


@cli.command("getConsumerStatus")
@common
@click.option("-g", "--group", required=True, help="consumer group")
@click.option("-t", "--topic", required=True)
@click.option("-i", "--originClientId", "client_id", default=None, help="only this client (its client id)")
@json_opt
def get_consumer_status(namesrv_addr: str | None, group: str, topic: str, client_id: str | None, as_json: bool) -> int:
    """The offsets of a topic each online client of a group holds (consumed up to there; the brokers get them
    at the client's next offset persist), asked from the clients through a broker."""
    table = run_admin(namesrv_addr, lambda a: a.consume_status(topic, group, client_id))
    per_client = {
        cid: sorted(offsets.items(), key=lambda item: (item[0].broker_name, item[0].queue_id))
        for cid, offsets in sorted(table.items())
    }
    if as_json:
        echo_json({cid: [{"queue": mq, "offset": off} for mq, off in queues] for cid, queues in per_client.items()})
        return 0
    click.echo(f"get consumer status from client. group={group}, topic={topic}, originClientId={client_id or ''}")
    echo_table(
        ["#clientId", "#brokerName", "#queueId", "#offset"],
        [(cid, mq.broker_name, mq.queue_id, off) for cid, queues in per_client.items() for mq, off in queues],
    )
    return 0


@cli.command("queryMsgTraceById")
@common
@click.option("-i", "--msgId", "msg_id", required=True, help="the message id (UNIQ_KEY) a send returned")
@click.option("-t", "--traceTopic", "trace_topic", default=None, help="default: RMQ_SYS_TRACE_TOPIC")
@json_opt
def query_msg_trace_by_id(namesrv_addr: str | None, msg_id: str, trace_topic: str | None, as_json: bool) -> int:
    """A message's trace: who sent it and which groups consumed it, when, how long it took."""
    contexts = run_admin(namesrv_addr, lambda a: a.query_msg_trace(msg_id, trace_topic))
    if not contexts:
        raise CommandError(f"no trace of message {msg_id} in {trace_topic or 'RMQ_SYS_TRACE_TOPIC'} (is message "
                           "trace enabled on its producer and consumers?)")
    if as_json:
        echo_json(contexts)
        return 0
    rows = []
    for c in contexts:
        bean = next(b for b in c.trace_beans if b.msg_id == msg_id)
        rows.append((c.trace_type.value, c.group_name or "-", fmt_ts(c.time_stamp),
                     f"{c.cost_time}ms" if c.trace_type.value != "SubBefore" else "-",
                     "success" if c.success else "failed", bean.store_host or "-", bean.retry_times))
    echo_table(["#Type", "#Group", "#Time", "#CostTimes", "#Status", "#StoreHost", "#RetryTimes"], rows)
    return 0


@cli.command("resetOffsetByTime")
@common
@click.option("-g", "--group", required=True)
@click.option("-t", "--topic", required=True)
@click.option("-s", "--timestamp", required=True, help="now | currentTimeMillis | yyyy-MM-dd#HH:mm:ss:SSS")
@click.option(
    "-f", "--force", default="true", show_default=True, help="also move offsets forward (true|false)"
)
@click.option("-c", "--cplus", is_flag=True, default=False, help="accepted for compatibility")
@json_opt
def reset_offset_by_time(
    namesrv_addr: str | None, group: str, topic: str, timestamp: str, force: str, cplus: bool, as_json: bool
) -> int:
    """Reset a group's offsets of a topic to a point in time."""
    ts = parse_timestamp(timestamp)
    fc = bool(parse_bool(force, "-f"))
    rows = run_admin(namesrv_addr, lambda a: a.reset_offset_by_time(group, topic, ts, force=fc))
    if as_json:
        echo_json(rows)
        return 0
    click.echo(
        f"rollback consumer offset by specified group[{group}], topic[{topic}], force[{str(fc).lower()}], timestamp(string)[{timestamp}], timestamp(long)[{ts}]"
    )
    echo_table(
        ["#brokerName", "#queueId", "#offset"],
        [(r.queue.broker_name, r.queue.queue_id, r.offset) for r in rows],
    )
    return 0


@cli.command("cloneGroupOffset")
@common
@click.option("-s", "--srcGroup", "src_group", required=True, help="set source consumer group")
@click.option("-d", "--destGroup", "dest_group", required=True, help="set destination consumer group")
@click.option(
    "-t", "--topic", default=None, help="set the topic (omitted: every topic the source group has offsets for)"
)
@click.option("-o", "--offline", default=None, help="the group or the topic is offline (true|false)")
@json_opt
def clone_group_offset(
    namesrv_addr: str | None,
    src_group: str,
    dest_group: str,
    topic: str | None,
    offline: str | None,
    as_json: bool,
) -> int:
    """Copy a consumer group's committed offsets to another group."""
    src, dest = src_group.strip(), dest_group.strip()
    t = (topic or "").strip()
    off = bool(parse_bool(offline, "-o"))
    addrs = run_admin(namesrv_addr, lambda a: a.clone_group_offset(src, dest, t or None, off))
    if as_json:
        echo_json({"srcGroup": src, "destGroup": dest, "topic": t or None, "offline": off, "brokers": addrs})
        return 0
    click.echo(f"clone group offset success. srcGroup[{src}], destGroup=[{dest}], topic[{t}]")
    return 0


# ---------------------------------------------------------------------- messages


@cli.command("queryMsgById")
@common
@click.option(
    "-i", "--msgId", "msg_ids", required=True, help="offsetMsgId or UNIQ_KEY id; several separated by commas"
)
@click.option("-t", "--topic", default=None, help="topic (needed to look up a UNIQ_KEY id)")
@click.option("-g", "--consumerGroup", "group", default=None, help="consumer group name (with -d)")
@click.option(
    "-d", "--clientId", "client_id", default=None, help="have this consumer client consume the message (with -g)"
)
@json_opt
def query_msg_by_id(
    namesrv_addr: str | None,
    msg_ids: str,
    topic: str | None,
    group: str | None,
    client_id: str | None,
    as_json: bool,
) -> int:
    """Show a message by its id; with -g and -d, have that consumer consume it now."""
    ids = [i.strip() for i in msg_ids.split(",") if i.strip()]
    if not ids:
        raise CommandError("-i needs at least one message id")
    if (group is None) != (client_id is None):
        raise CommandError("give both -g consumerGroup and -d clientId, or neither")
    if group is not None and client_id is not None:
        g, cid = group.strip(), client_id.strip()

        async def push(a: Admin) -> list[ConsumeMessageDirectlyResult]:
            return [await a.consume_message_directly(g, cid, i, topic) for i in ids]

        results = run_admin(namesrv_addr, push)
        if as_json:
            echo_json(results if len(results) > 1 else results[0])
            return 0
        for r in results:
            click.echo(
                f"ConsumeMessageDirectlyResult [order={str(r.order).lower()}, autoCommit={str(r.auto_commit).lower()}, "
                f"consumeResult={r.consume_result}, remark={r.remark}, spentTimeMills={r.spent_time_mills}]"
            )
        return 0

    async def go(a: Admin) -> list[MessageExt]:
        return [await a.view_message(i, topic) for i in ids]

    msgs = run_admin(namesrv_addr, go)
    if as_json:
        echo_json(msgs if len(msgs) > 1 else msgs[0])
        return 0
    for n, m in enumerate(msgs):
        if n:
            click.echo("")
        echo_message(m)
    return 0


@cli.command("queryMsgByUniqueKey")
@common
@click.option("-i", "--msgId", "msg_id", required=True, help="the client-side id (UNIQ_KEY) from a SendResult")
@click.option("-t", "--topic", required=True)
@json_opt
def query_msg_by_unique_key(namesrv_addr: str | None, msg_id: str, topic: str, as_json: bool) -> int:
    """Show a message by its UNIQ_KEY id (what most clients return as msgId)."""

    async def go(a: Admin) -> MessageExt | None:
        return await a.query_message_by_unique_key(topic, msg_id.strip())

    msg = run_admin(namesrv_addr, go)
    if msg is None:
        raise CommandError(f"no message with unique key {msg_id} in topic {topic}")
    if as_json:
        echo_json(msg)
    else:
        echo_message(msg)
    return 0


@cli.command("queryMsgByKey")
@common
@click.option("-t", "--topic", required=True)
@click.option("-k", "--msgKey", "key", required=True)
@click.option("-b", "--beginTimestamp", "begin", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-e", "--endTimestamp", "end", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-c", "--maxNum", "max_num", type=int, default=64, show_default=True)
@json_opt
def query_msg_by_key(
    namesrv_addr: str | None,
    topic: str,
    key: str,
    begin: str | None,
    end: str | None,
    max_num: int,
    as_json: bool,
) -> int:
    """Messages of a topic with a given key (KEYS)."""
    b = parse_timestamp(begin) if begin else 0
    e = parse_timestamp(end) if end else 2**63 - 1
    msgs = run_admin(
        namesrv_addr,
        lambda a: a.query_message_by_key(topic, key, max_num=max_num, begin_timestamp=b, end_timestamp=e),
    )
    if as_json:
        echo_json(msgs)
        return 0
    if not msgs:
        raise CommandError(f"no message with key {key!r} in topic {topic}")
    echo_table(
        ["#Message ID", "#QID", "#Offset", "#Store Time"],
        [(m.uniq_key or m.msg_id, m.queue_id, m.queue_offset, fmt_ts(m.store_timestamp)) for m in msgs],
    )
    return 0


@cli.command("queryMsgByOffset")
@common
@click.option("-t", "--topic", required=True)
@click.option("-b", "--brokerName", "broker_name", required=True)
@click.option("-i", "--queueId", "queue_id", type=int, required=True)
@click.option("-o", "--offset", type=int, required=True)
@json_opt
def query_msg_by_offset(
    namesrv_addr: str | None, topic: str, broker_name: str, queue_id: int, offset: int, as_json: bool
) -> int:
    """The message at a queue offset."""
    m = run_admin(namesrv_addr, lambda a: a.query_message_by_offset(topic, broker_name, queue_id, offset))
    if as_json:
        echo_json(m)
    else:
        echo_message(m)
    return 0


@cli.command("queryCq")
@common
@click.option("-t", "--topic", required=True, help="topic name")
@click.option("-q", "--queue", "queue_id", type=int, required=True, help="queue id, ie. 1")
@click.option("-i", "--index", type=int, required=True, help="start queue index (queue offset)")
@click.option("-c", "--count", type=int, default=10, show_default=True, help="how many units")
@click.option("-b", "--broker", "broker_addr", default=None, help="broker address (default: the topic's first broker)")
@click.option("-g", "--consumer", "group", default=None, help="consumer group: show its subscription and filter")
@json_opt
def query_cq(
    namesrv_addr: str | None,
    topic: str,
    queue_id: int,
    index: int,
    count: int,
    broker_addr: str | None,
    group: str | None,
    as_json: bool,
) -> int:
    """A consume queue's units (commit log offset, size, tags code) from a queue index (QUERY_CONSUME_QUEUE)."""
    view = run_admin(
        namesrv_addr,
        lambda a: a.query_consume_queue(topic, queue_id, index, count, group=group, broker_addr=broker_addr),
    )
    if as_json:
        echo_json(view)
        return 0
    click.echo(f"Broker: {view.broker_addr}  Queue: {queue_id}@{topic}  "
               f"min index: {view.min_queue_index}  max index: {view.max_queue_index}")
    if view.subscription_data is not None:
        click.echo("Subscription data:")
        click.echo(json.dumps(to_jsonable(view.subscription_data), indent=2, ensure_ascii=False))
    if view.filter_data is not None:
        click.echo("Filter data:")
        click.echo(view.filter_data)
    click.echo("")
    if view.remark and not view.units:
        click.echo(view.remark)
        return 0
    # The ext columns only when a (Java) broker with consume queue ext units filled them.
    ext = any(u.extend_data_json or u.bit_map or u.msg or u.eval for u in view.units)
    headers = ["#Index", "#Physic Offset", "#Physic Size", "#Tags Code"]
    if ext:
        headers += ["#Eval", "#BitMap", "#Msg", "#ExtendData"]
    rows = []
    for u in view.units:
        row: list[object] = [u.index, u.physic_offset, u.physic_size, u.tags_code]
        if ext:
            row += [str(u.eval).lower(), u.bit_map or "-", u.msg or "-", u.extend_data_json or "-"]
        rows.append(row)
    echo_table(headers, rows)
    return 0


@cli.command("sendMessage")
@common
@click.option("-t", "--topic", required=True)
@click.option("-p", "--body", required=True, help="UTF-8 message body")
@click.option("-k", "--key", default=None, help="message keys (space separated)")
@click.option("-c", "--tags", default=None)
@click.option("-b", "--broker", "broker_name", default=None, help="send to this broker (with -i)")
@click.option("-i", "--qid", "queue_id", type=int, default=None, help="send to this queue (with -b)")
@click.option("-m", "--msgTraceEnable", "trace", default=None, help="accepted for compatibility")
@json_opt
def send_message(
    namesrv_addr: str | None,
    topic: str,
    body: str,
    key: str | None,
    tags: str | None,
    broker_name: str | None,
    queue_id: int | None,
    trace: str | None,
    as_json: bool,
) -> int:
    """Send one message."""
    if (broker_name is None) != (queue_id is None):
        raise CommandError("give both -b broker and -i qid, or neither")
    r = run_admin(
        namesrv_addr,
        lambda a: a.send_message(
            topic, body, keys=key, tags=tags, broker_name=broker_name, queue_id=queue_id
        ),
    )
    if as_json:
        echo_json(r)
        return 0
    echo_table(
        ["#Broker Name", "#QID", "#Send Result", "#MsgId", "#OffsetMsgId", "#Queue Offset"],
        [(r.queue.broker_name, r.queue.queue_id, r.status.value, r.msg_id, r.offset_msg_id, r.queue_offset)],
    )
    return 0


@cli.command("consumeMessage")
@common
@click.option("-t", "--topic", required=True)
@click.option("-g", "--consumerGroup", "group", default="TOOLS_CONSUMER", show_default=True)
@click.option("-b", "--brokerName", "broker_name", default=None)
@click.option("-i", "--queueId", "queue_id", type=int, default=None)
@click.option("-o", "--offset", type=int, default=None, help="start offset (default: the queue's min offset)")
@click.option("-c", "--MessageNumber", "count", type=int, default=128, show_default=True)
@click.option("-s", "--beginTimestamp", "begin", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-e", "--endTimestamp", "end", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@json_opt
def consume_message(
    namesrv_addr: str | None,
    topic: str,
    group: str,
    broker_name: str | None,
    queue_id: int | None,
    offset: int | None,
    count: int,
    begin: str | None,
    end: str | None,
    as_json: bool,
) -> int:
    """Pull and print messages (no group membership, offsets not committed)."""
    if (broker_name is None) != (queue_id is None):
        raise CommandError("give both -b brokerName and -i queueId, or neither")
    if count <= 0:
        raise CommandError("-c must be > 0")
    b = parse_timestamp(begin) if begin else None
    e = parse_timestamp(end) if end else None
    msgs = run_admin(
        namesrv_addr,
        lambda a: a.consume_messages(
            topic,
            broker_name=broker_name,
            queue_id=queue_id,
            offset=offset,
            count=count,
            begin_timestamp=b,
            end_timestamp=e,
            group=group,
        ),
    )
    if as_json:
        echo_json(msgs)
        return 0
    echo_table(
        ["#Store Host", "#QID", "#Offset", "#MsgId", "#Tags", "#Keys", "#Body"],
        [
            (
                _broker_of(m),
                m.queue_id,
                m.queue_offset,
                m.uniq_key or m.msg_id,
                m.tags or "",
                m.keys or "",
                _preview(m.body),
            )
            for m in msgs
        ],
    )
    click.echo(f"Consume ok: {len(msgs)} message(s)")
    return 0


def _broker_of(m: MessageExt) -> str:
    return f"{m.store_host[0]}:{m.store_host[1]}"


def _preview(body: bytes, n: int = 60) -> str:
    text = body_text(body).replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 3] + "..."


# ---------------------------------------------------------------------- NameServer


@cli.command("getNamesrvConfig")
@common
@json_opt
def get_namesrv_config(namesrv_addr: str | None, as_json: bool) -> int:
    """Each NameServer's configuration."""
    result = run_admin(namesrv_addr, lambda a: a.get_namesrv_config())
    if as_json:
        echo_json(result)
        return 0
    for addr, props in result.items():
        click.echo(f"============{addr}============")
        for k in sorted(props):
            click.echo(f"{k:<50}=  {props[k]}")
    return 0


@cli.command("updateNamesrvConfig")
@common
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
def update_namesrv_config(namesrv_addr: str | None, key: str, value: str) -> int:
    """Change a NameServer config key at runtime (on every NameServer given)."""
    run_admin(namesrv_addr, lambda a: a.update_namesrv_config(key, value))
    click.echo(f"update name server config success! {_namesrv(namesrv_addr)}")
    click.echo(f"{key} : {value}")
    return 0


@cli.command("updateKvConfig")
@common
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
def update_kv_config(namesrv_addr: str | None, namespace: str, key: str, value: str) -> int:
    """Create or update a KV config entry on the NameServers."""
    run_admin(namesrv_addr, lambda a: a.put_kv_config(namespace, key, value))
    click.echo("create or update kv config to namespace success.")
    return 0


@cli.command("deleteKvConfig")
@common
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
def delete_kv_config(namesrv_addr: str | None, namespace: str, key: str) -> int:
    """Delete a KV config entry from the NameServers."""
    run_admin(namesrv_addr, lambda a: a.delete_kv_config(namespace, key))
    click.echo("delete kv config from namespace success.")
    return 0


@cli.command("getKvConfig")
@common
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", default=None, help="one key (else the whole namespace)")
@json_opt
def get_kv_config(namesrv_addr: str | None, namespace: str, key: str | None, as_json: bool) -> int:
    """Read a KV config entry, or a whole namespace."""
    if key:
        value = run_admin(namesrv_addr, lambda a: a.get_kv_config(namespace, key))
        table = {key: value}
    else:
        table = run_admin(namesrv_addr, lambda a: a.get_kv_list(namespace))
    if as_json:
        echo_json(table)
        return 0
    echo_table(["#Key", "#Value"], sorted(table.items()))
    return 0


# ---------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging(level=os.environ.get("RMQ_LOG_LEVEL", "ERROR"))
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = cli.main(args=args, prog_name="mqadmin", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.ClickException as e:
        e.show()
        return int(e.exit_code)
    except click.exceptions.Abort:
        click.echo("mqadmin: aborted", err=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # never a traceback for the user
        if os.environ.get("RMQ_DEBUG"):
            raise
        click.echo(f"mqadmin: {_one_line(e)}", err=True)
        return EXIT_ERROR
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
