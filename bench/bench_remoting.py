"""Remoting micro-benchmark: round trips/s for small requests, one connection, many in flight.

The echo server runs in its own process (as a broker would); the client pipelines WINDOW requests.
Prints one line per serialize type and run, then the medians. Not a test: figures vary by machine.

    .venv/bin/python bench/bench_remoting.py [--count 50000] [--window 256] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remoting import RemotingClient, RemotingCommand, RemotingServer, RequestDispatcher, SerializeType  # noqa: E402
from remoting.loop import run  # noqa: E402


def serve(port_q: mp.Queue) -> None:
    async def main() -> None:
        d = RequestDispatcher()
        d.register(1, lambda ctx, cmd: cmd.response(ext_fields={"queueOffset": "1", "queueId": "0"}))
        srv = RemotingServer(d, host="127.0.0.1", port=0)
        _, port = await srv.start()
        port_q.put(port)
        await asyncio.Event().wait()

    run(main())


async def round_trips(addr: str, stype: SerializeType, count: int, window: int) -> float:
    client = RemotingClient(serialize_type=stype)
    ext = {"a": "group", "b": "TopicTest", "e": "0", "g": "1700000000000", "i": "TAGS\x01a\x02"}
    await client.invoke(addr, RemotingCommand.request(1, dict(ext)))
    per_worker = count // window

    async def worker() -> None:
        # WINDOW workers, each with one request in flight: WINDOW in flight on one connection.
        for _ in range(per_worker):
            fut = await client.invoke_future(addr, RemotingCommand.request(1, dict(ext)), 10000)
            await fut

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    count = per_worker * window
    dt = time.perf_counter() - t0
    await client.close()
    return count / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=50000)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    q: mp.Queue = mp.Queue()
    p = mp.Process(target=serve, args=(q,), daemon=True)
    p.start()
    try:
        addr = f"127.0.0.1:{q.get(timeout=10)}"
        results: dict[str, list[float]] = {}
        for _ in range(a.runs):
            for st in SerializeType:
                r = run(round_trips(addr, st, a.count, a.window))
                results.setdefault(st.name, []).append(r)
                print(f"{st.name:9s} {r:10.0f} round trips/s", flush=True)
        print("medians:", {k: round(statistics.median(v)) for k, v in results.items()})
    finally:
        p.terminate()
        p.join(5)


if __name__ == "__main__":
    main()
