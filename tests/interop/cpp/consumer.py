"""Runs under build/venv-cpp (the real RocketMQ C++ client core): a push consumer that prints
every message it gets as a JSON line, until its stdin closes (or "max_s" passes).

    python consumer.py SPEC.json

SPEC: {"namesrv": "ip:port", "group": "G", "topic": "T", "expression": "*", "orderly": false,
       "threads": 4, "props": ["p1", ...], "fail_first": false, "instance": "name", "max_s": 60}
"fail_first": answer RECONSUME_LATER for a message delivered for the first time (reconsume
times 0), CONSUME_SUCCESS otherwise. Lines: {"started": true}, then one per delivery, then
{"exit": true}. PushConsumer.shutdown() segfaults in this build, so the process ends with
os._exit(0) without it (offsets are committed by the client every 5 s meanwhile).
"""

import json
import os
import sys
import threading
import time

from rocketmq.client import PushConsumer, RecvMessage
from rocketmq.ffi import MSG_CALLBACK_FUNC, dll

spec = json.load(open(sys.argv[1]))
lock = threading.Lock()  # the core calls back on several threads


def out(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def text(v):
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def on_message(consumer, handle):
    msg = RecvMessage(handle)
    reconsume = msg.reconsume_times
    later = bool(spec.get("fail_first")) and reconsume == 0
    out(
        {
            "body": text(msg.body),
            "tags": text(msg.tags),
            "keys": text(msg.keys),
            "id": msg.id,
            "topic": msg.topic,
            "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset,
            "reconsume_times": reconsume,
            "commit_log_offset": msg.commit_log_offset,
            "props": {p: text(msg.get_property(p)) for p in spec.get("props", [])},
            "thread": threading.get_ident(),
            "t": time.monotonic(),
            "later": later,
        }
    )
    return 1 if later else 0  # RECONSUME_LATER / CONSUME_SUCCESS (the binding's wrapper cannot say LATER)


consumer = PushConsumer(spec["group"], orderly=bool(spec.get("orderly")))
consumer.set_namesrv_addr(spec["namesrv"])
if spec.get("threads"):
    consumer.set_thread_count(int(spec["threads"]))
if spec.get("instance"):
    consumer.set_instance_name(spec["instance"])
callback = MSG_CALLBACK_FUNC(on_message)
dll.Subscribe(consumer._handle, spec["topic"].encode(), spec.get("expression", "*").encode())
register = dll.RegisterMessageCallbackOrderly if spec.get("orderly") else dll.RegisterMessageCallback
register(consumer._handle, callback)
consumer.start()
out({"started": True})

done = threading.Event()


def watch_stdin():
    sys.stdin.read()  # returns when the test closes our stdin
    done.set()


threading.Thread(target=watch_stdin, daemon=True).start()
done.wait(float(spec.get("max_s", 60)))
out({"exit": True})
os._exit(0)
