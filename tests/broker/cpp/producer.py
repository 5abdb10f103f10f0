"""Run with the real RocketMQ C++ client's venv: send N messages (alternating tags A/B), print results."""

import sys

from rocketmq.client import Message, Producer

ns, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer("PID-interop")
p.set_namesrv_addr(ns)
p.start()
for i in range(n):
    m = Message(topic)
    m.set_keys(f"key{i}")
    m.set_tags("TagA" if i % 2 == 0 else "TagB")
    m.set_property("idx", str(i))
    m.set_body(f"cpp-{i}")
    r = p.send_sync(m)
    print("SENT", int(r.status), r.msg_id, r.offset, flush=True)
p.shutdown()
