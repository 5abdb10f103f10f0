"""Bar chart of bench/results.json (written by compare.py): msgs/s and p99 per workload and system.

Runs in build/venv-bench (matplotlib): build/venv-bench/bin/python bench/chart.py results.json results.png
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SYSTEMS = [("this", "this project", "#d9534f"), ("redis", "Redis Streams", "#5bc0de"), ("nats", "NATS JetStream", "#5cb85c")]


def main(src: str, dst: str) -> None:
    data = json.load(open(src))
    summary = data["summary"]
    workloads = list(summary)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 9))
    width = 0.27
    for i, (key, label, color) in enumerate(SYSTEMS):
        xs = [j + (i - 1) * width for j in range(len(workloads))]
        rates = [summary[w].get(key, {}).get("msgs_s") or 0 for w in workloads]
        bars = ax1.bar(xs, rates, width, label=label, color=color)
        for b, v in zip(bars, rates, strict=True):
            if v:
                ax1.annotate(f"{v / 1000:.0f}k", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                             fontsize=7)
        p99 = [summary[w].get(key, {}).get("p99_ms") or 0 for w in workloads]
        ax2.bar(xs, p99, width, label=label, color=color)
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(workloads, rotation=15, fontsize=8)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    ax1.set_ylabel("msgs/s (median)")
    ax1.set_title(f"1 KiB messages, loopback, {data['meta']['machine']['nproc']} CPUs - {data['meta']['date']}")
    ax2.set_ylabel("p99 latency, ms (latency workloads)")
    ax2.set_yscale("symlog", linthresh=1.0)
    fig.tight_layout()
    fig.savefig(dst, dpi=100)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
