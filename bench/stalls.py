"""Where a daemon's threads stall: the longest runs of one unchanged stack in a py-spy timeline.

    py-spy record -r 1000 -p PID --format speedscope --nonblocking -o out.json   (while the workload runs)
    python bench/stalls.py out.json [--min 5] [--top 8]

py-spy's speedscope output keeps each thread's samples in time order, so consecutive samples with the same
stack are time spent in one place: at 1 000 samples a second, a run of 30 is ~30 ms (a fault, a blocking
call, a long computation). A profile by function, which sums time wherever it falls, hides those. Idle
stacks (the event loop waiting in `Runner.run`, a worker thread waiting for work) are left out.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

# Innermost frames of a waiting thread: an event loop (asyncio.Runner.run, with uvloop's C loop below it) and
# a ThreadPoolExecutor worker blocked on its queue (concurrent.futures.thread._worker).
IDLE_LEAVES = frozenset({"Runner.run", "_worker"})


def runs_of(samples: list[list[int]], frames: list[dict[str, Any]], min_len: int) -> list[tuple[int, int, str]]:
    """(first sample, length, innermost frames) of each run of >= min_len identical, non-idle stacks."""
    out: list[tuple[int, int, str]] = []
    start = 0
    for i in range(1, len(samples) + 1):
        if i < len(samples) and samples[i] == samples[start]:
            continue
        stack = samples[start]
        if i - start >= min_len and stack and frames[stack[-1]]["name"] not in IDLE_LEAVES:
            label = "; ".join(f"{frames[f]['name']}:{frames[f].get('line', '')}" for f in stack[-3:])
            out.append((start, i - start, label))
        start = i
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("speedscope_json")
    ap.add_argument("--min", type=int, default=5, help="shortest run reported, in samples")
    ap.add_argument("--top", type=int, default=8, help="runs reported per thread")
    a = ap.parse_args()
    with open(a.speedscope_json) as fh:
        doc = json.load(fh)
    frames = doc["shared"]["frames"]
    for prof in doc["profiles"]:
        runs = runs_of(prof["samples"], frames, a.min)
        if not runs:
            continue
        print(f"{prof['name']}: {len(prof['samples'])} samples, {sum(n for _, n, _ in runs)} in runs of >= {a.min}")
        for first, n, label in sorted(runs, key=lambda r: -r[1])[: a.top]:
            print(f"  {n:6d} samples from sample {first}: {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
