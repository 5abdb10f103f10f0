"""Runs under build/venv-cpp (the real RocketMQ C++ client core): send what a JSON spec lists.

    python producer.py SPEC.json

SPEC: {"namesrv": "ip:port", "group": "PID", "timeout_ms": 3000,
       "sends": [{"topic": "T", "body": "...", "tags": "A", "keys": "k1 k2", "props": {"p": "v"},
                  "order_arg": 7, "mode": "sync"}, ...]}
"mode": "sync" (default; send_orderly when "order_arg" is given, with a selector that picks
arg % queue count), "oneway", "async" (waits for its callback), or "batch" (the send's
"messages" list goes as one send_batch).
Prints one JSON line per send ({"i", "status", "msg_id", "offset", "queue"} or {"i", "error"}),
then {"done": n}. Producer.shutdown() is safe in this build.
"""

import json
import sys
import threading

from rocketmq.client import Message, Producer

spec = json.load(open(sys.argv[1]))
producer = Producer(spec.get("group", "PID-interop"), timeout=spec.get("timeout_ms", 3000))
producer.set_namesrv_addr(spec["namesrv"])
producer.start()
chosen = {}


def select(mq_size, msg, arg):
    q = int(chosen["arg"]) % mq_size
    chosen["queue"] = q
    chosen["size"] = mq_size
    return q


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def build(s):
    m = Message(s["topic"])
    if s.get("keys"):
        m.set_keys(s["keys"])
    if s.get("tags"):
        m.set_tags(s["tags"])
    for k, v in (s.get("props") or {}).items():
        m.set_property(k, v)
    m.set_body(s.get("body", ""))
    return m


def send_async(m):
    done, box = threading.Event(), {}

    def ok(r):
        box["result"] = r
        done.set()

    def failed(e):
        box["error"] = e
        done.set()

    producer.send_async(m, ok, failed)
    if not done.wait(30):
        raise TimeoutError("no send_async callback within 30 s")
    if "error" in box:
        raise box["error"]
    return box["result"]


for i, s in enumerate(spec["sends"]):
    mode = s.get("mode", "sync")
    chosen.clear()
    try:
        if mode == "batch":
            msgs = [build(x) for x in s["messages"]]
            r = producer.send_batch(msgs)
        elif mode == "oneway":
            producer.send_oneway(build(s))
            out({"i": i, "status": 0, "msg_id": None, "offset": None, "queue": None, "queues": None})
            continue
        elif mode == "async":
            r = send_async(build(s))
        elif "order_arg" in s:
            m = build(s)
            chosen["arg"] = s["order_arg"]
            r = producer.send_orderly(m, int(s["order_arg"]), queue_selector=select)
        else:
            r = producer.send_sync(build(s))
    except Exception as e:  # the binding raises ProducerSendSyncFailed & co with the core's message
        out({"i": i, "error": f"{type(e).__name__}: {e}"})
        continue
    out(
        {
            "i": i,
            "status": int(r.status),
            "msg_id": r.msg_id,
            "offset": r.offset,
            "queue": chosen.get("queue"),
            "queues": chosen.get("size"),
        }
    )
producer.shutdown()
out({"done": len(spec["sends"])})
