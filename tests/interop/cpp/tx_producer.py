"""Runs under build/venv-cpp (the real RocketMQ C++ client core): transactional sends through the
core's C API (the Python binding does not wrap it).

    python tx_producer.py SPEC.json

SPEC: {"namesrv": "ip:port", "group": "PID", "topic": "T", "max_s": 60,
       "sends": [{"body": "...", "keys": "k", "local": "commit|rollback|unknown", "check": "commit|rollback|unknown"}]}
"local" is what the local-transaction executor answers; "check" what the checker answers when
the broker asks back (CHECK_TRANSACTION_STATE) about that message (found by its keys).
Prints one JSON line per send ({"i", "status", "msg_id"} or {"i", "error"}), then {"sent": n},
one per check-back ({"checked": keys, "answer": ...}); it stays online (for the broker's
check-backs) until its stdin closes or "max_s" passes.
"""

import ctypes
import json
import os
import sys
import threading
from ctypes import POINTER, c_int, c_void_p

from rocketmq.client import Message, RecvMessage
from rocketmq.ffi import _CSendResult, dll

spec = json.load(open(sys.argv[1]))
STATUS = {"commit": 0, "rollback": 1, "unknown": 2}  # CTransactionStatus
lock = threading.Lock()


def out(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


CHECKER = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p)
EXECUTOR = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p)
by_keys = {s["keys"]: s for s in spec["sends"]}
current = {}


def check(producer, msg_ext, data):
    keys = RecvMessage(msg_ext).keys.decode()
    answer = by_keys.get(keys, {}).get("check", "unknown")
    out({"checked": keys, "answer": answer})
    return STATUS[answer]


def execute(producer, msg, data):
    return STATUS[current["local"]]


checker = CHECKER(check)
executor = EXECUTOR(execute)
dll.CreateTransactionProducer.argtypes = [ctypes.c_char_p, CHECKER, c_void_p]
dll.CreateTransactionProducer.restype = c_void_p
dll.SendMessageTransaction.argtypes = [c_void_p, c_void_p, EXECUTOR, c_void_p, POINTER(_CSendResult)]
dll.SendMessageTransaction.restype = c_int
dll.SetProducerNameServerAddress.argtypes = [c_void_p, ctypes.c_char_p]
dll.StartProducer.argtypes = [c_void_p]
dll.ShutdownProducer.argtypes = [c_void_p]
dll.GetLatestErrorMessage.restype = ctypes.c_char_p

handle = dll.CreateTransactionProducer(spec.get("group", "PID-tx").encode(), checker, None)
dll.SetProducerNameServerAddress(handle, spec["namesrv"].encode())
if dll.StartProducer(handle) != 0:
    out({"error": "start failed: " + (dll.GetLatestErrorMessage() or b"").decode()})
    os._exit(1)
for i, s in enumerate(spec["sends"]):
    m = Message(spec["topic"])
    m.set_keys(s["keys"])
    m.set_body(s["body"])
    current["local"] = s["local"]
    res = _CSendResult()
    rc = dll.SendMessageTransaction(handle, m._handle, executor, None, ctypes.pointer(res))
    if rc != 0:
        out({"i": i, "error": (dll.GetLatestErrorMessage() or b"").decode()})
    else:
        out({"i": i, "status": res.sendStatus, "msg_id": res.msgId.decode()})
out({"sent": len(spec["sends"])})
done = threading.Event()


def watch_stdin():
    sys.stdin.read()  # returns when the test closes our stdin
    done.set()


threading.Thread(target=watch_stdin, daemon=True).start()
done.wait(float(spec.get("max_s", 60)))
os._exit(0)  # like the push consumer, skip the core's shutdown path
