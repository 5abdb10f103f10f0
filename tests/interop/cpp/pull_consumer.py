"""Runs under build/venv-cpp (the real RocketMQ C++ client core): a pull consumer that reads every
queue of a topic from offset 0 up to its end once, printing each message as a JSON line.

    python pull_consumer.py SPEC.json

SPEC: {"namesrv": "ip:port", "group": "G", "topic": "T", "expression": "*", "props": ["p1"]}
Lines: one per message, then {"done": n}. Ends with os._exit(0) like the push consumer.
"""

import json
import os
import sys

from rocketmq.client import PullConsumer

spec = json.load(open(sys.argv[1]))


def text(v):
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


consumer = PullConsumer(spec["group"])
consumer.set_namesrv_addr(spec["namesrv"])
consumer.start()
n = 0
for msg in consumer.pull(spec["topic"], spec.get("expression", "*")):
    n += 1
    sys.stdout.write(
        json.dumps(
            {
                "body": text(msg.body),
                "tags": text(msg.tags),
                "keys": text(msg.keys),
                "id": msg.id,
                "topic": msg.topic,
                "queue_id": msg.queue_id,
                "queue_offset": msg.queue_offset,
                "props": {p: text(msg.get_property(p)) for p in spec.get("props", [])},
            }
        )
        + "\n"
    )
sys.stdout.write(json.dumps({"done": n}) + "\n")
sys.stdout.flush()
os._exit(0)
