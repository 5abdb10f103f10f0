"""Read probe for bench/read_timeline.py, loaded by Python at start-up when this folder is on PYTHONPATH
and READ_PROBE names an output prefix (it does nothing otherwise).

It wraps RemotingConnection.data_received, before any connection exists, to record for every read: its wall
start and duration, the thread's CPU time meanwhile, getrusage's voluntary and involuntary context
switches meanwhile, and the bytes read; and every cyclic-gc collection (start, duration, generation). The
records go to READ_PROBE.<pid>.json at exit, and on SIGUSR2 (a daemon stopped by SIGTERM may not run
atexit handlers). Cost: ~3 us a read (two getrusage calls), nothing per message.
"""

from __future__ import annotations

import os

if os.environ.get("READ_PROBE"):
    import atexit
    import gc
    import json
    import resource
    import signal
    import sys
    import time
    from typing import Any

    _out = f"{os.environ['READ_PROBE']}.{os.getpid()}.json"
    _reads: list[tuple[int, ...]] = []
    _gcs: list[tuple[int, int, int]] = []
    _gc_start = [0]

    def _on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            _gc_start[0] = time.time_ns()
        else:
            _gcs.append((_gc_start[0], time.time_ns() - _gc_start[0], info["generation"]))

    def _dump(*_args: Any) -> None:
        tmp = _out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"argv": sys.argv, "pid": os.getpid(), "reads": _reads, "gc": _gcs}, f)
        os.replace(tmp, _out)

    def _install() -> None:
        from remoting import connection

        cls = connection.RemotingConnection
        inner = cls.data_received
        wall, cpu, usage, who = time.time_ns, time.thread_time_ns, resource.getrusage, resource.RUSAGE_THREAD
        add = _reads.append

        def data_received(self: Any, data: bytes) -> None:
            r0, c0, w0 = usage(who), cpu(), wall()
            try:
                inner(self, data)
            finally:
                w1, c1, r1 = wall(), cpu(), usage(who)
                add((w0, w1 - w0, c1 - c0, r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, len(data)))

        cls.data_received = data_received  # type: ignore[method-assign]

    try:
        _install()
    except ImportError:  # not a process of this project
        pass
    else:
        gc.callbacks.append(_on_gc)
        atexit.register(_dump)
        signal.signal(signal.SIGUSR2, _dump)
