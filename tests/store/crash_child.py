"""Crash-test child: runs a store and puts messages until killed, printing every acknowledged one.

    python crash_child.py ROOT ASYNC_FLUSH|SYNC_FLUSH BATCH [LIMIT [FIRST]]

Prints "READY" once started, then "ACK <uniq> <queue_id> <queue_offset> <commit_log_offset>" per
acknowledged message (flushed to stdout before the next put), and "DONE" after LIMIT messages (then idles
so the parent can SIGKILL it without a clean shutdown). Messages are numbered from FIRST (default 0).
With CRASH_SHADOW set, the store's durability calls are recorded there (power_loss.py); with CRASH_CLEANUP,
its files expire at once (child_config's cleanup).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import structlog  # noqa: E402

from remoting.message import encode_properties  # noqa: E402
from store.config import MessageStoreConfig  # noqa: E402
from store.message import MessageExtBrokerInner  # noqa: E402
from store.message_store import DefaultMessageStore  # noqa: E402
from store.results import PutMessageStatus  # noqa: E402

QUEUES = 4


def child_config(root: str, flush: str, cleanup: bool = False) -> MessageStoreConfig:
    """`cleanup`: every CommitLog file but the one being written is expired at once, and cleaned up
    every 200 ms (consume queue and index files follow)."""
    expire = (
        {"deleteWhen": ";".join(f"{h:02d}" for h in range(24)), "fileReservedTime": 0, "cleanResourceInterval": 200,
         "deleteCommitLogFilesInterval": 0, "deleteConsumeQueueFilesInterval": 0}
        if cleanup else {}
    )
    return MessageStoreConfig(
        **expire,
        storePathRootDir=root,
        flushDiskType=flush,
        mappedFileSizeCommitLog=256 * 1024,
        mappedFileSizeConsumeQueue=500 * 20,
        maxHashSlotNum=256,
        maxIndexNum=2000,
        flushIntervalCommitLog=50,
        flushIntervalConsumeQueue=100,
        flushConsumeQueueThoroughInterval=300,  # the live index file is synced (and checkpointed) too
    )


def message(i: int, queue_id: int) -> MessageExtBrokerInner:
    props = {"TAGS": f"Tag{i % 3}", "KEYS": f"K{i}", "UNIQ_KEY": f"U{i:08d}"}
    return MessageExtBrokerInner(
        topic="CrashTopic",
        body=(f"body-{i}-".encode() * 40)[: 200 + (i * 37) % 900],
        queue_id=queue_id,
        properties=props,
        properties_string=encode_properties(props),
        born_timestamp=int(time.time() * 1000),
        born_host=("10.0.0.1", 40000),
        store_host=("10.0.0.2", 10911),
    )


async def main(root: str, flush: str, batch: int, limit: int, first: int) -> None:
    shadow = os.environ.get("CRASH_SHADOW")
    if shadow:
        from tests.store.power_loss import PowerLossRecorder

        PowerLossRecorder(root, shadow).install()
    store = DefaultMessageStore(child_config(root, flush, cleanup=bool(os.environ.get("CRASH_CLEANUP"))))
    await store.start()
    out = sys.stdout
    out.write("READY\n")
    out.flush()
    i = first
    while limit <= 0 or i < first + limit:
        msgs = [message(i + k, (i // batch) % QUEUES) for k in range(batch)]  # a batch is one queue
        if batch == 1:
            r = await store.put_message(msgs[0])
        else:
            r = await store.put_messages(msgs)
        ar = r.append_result
        if r.status == PutMessageStatus.PUT_OK and ar is not None:
            offsets = ar.phy_offsets or [ar.wrote_offset]
            lines = [
                f"ACK {m.properties['UNIQ_KEY']} {m.queue_id} {ar.logics_offset + k} {offsets[k]}\n"
                for k, m in enumerate(msgs)
            ]
            out.write("".join(lines))
            out.flush()
        i += batch
        if i % 64 == 0:
            await asyncio.sleep(0)  # let the dispatcher and flusher run
    out.write("DONE\n")
    out.flush()
    await asyncio.sleep(3600)


if __name__ == "__main__":
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    args = sys.argv[1:] + ["0", "0"]
    asyncio.run(main(args[0], args[1], int(args[2]), int(args[3]), int(args[4])))
