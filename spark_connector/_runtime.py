"""Per-process client objects for Spark's Python workers.

Spark reuses a Python worker process for many tasks (spark.python.worker.reuse, on by default), so
executors keep one BlockingQueueReader (one background loop, one connection per broker) per
process and NameServer set instead of connecting for every partition. The cache is keyed by
process id as well, so a forked child never uses its parent's loop thread.
"""

from __future__ import annotations

import atexit
import os
import threading

from client.reader import BlockingQueueReader

from .options import SourceOptions

_lock = threading.Lock()
_readers: dict[tuple[object, ...], BlockingQueueReader] = {}


def reader_key(opts: SourceOptions) -> tuple[object, ...]:
    return (os.getpid(), opts.namesrv_addr, opts.reader_group, opts.pull_batch_size, opts.pull_pipeline, opts.pull_timeout_ms)


def shared_reader(opts: SourceOptions) -> BlockingQueueReader:
    """The process's reader for these options (created on first use)."""
    key = reader_key(opts)
    with _lock:
        r = _readers.get(key)
        if r is None:
            for stale in [k for k in _readers if k[0] != os.getpid()]:
                _readers.pop(stale, None)  # inherited through fork: its loop thread is not ours
            r = new_reader(opts)
            _readers[key] = r
        return r


def drop_shared_reader(opts: SourceOptions) -> None:
    """Forget (and close) the process's reader for these options, e.g. after a connection failure."""
    with _lock:
        r = _readers.pop(reader_key(opts), None)
    if r is not None:
        r.close()


def new_reader(opts: SourceOptions) -> BlockingQueueReader:
    return BlockingQueueReader(
        opts.namesrv_addr,
        consumer_group=opts.reader_group,
        pull_batch_size=opts.pull_batch_size,
        pipeline=opts.pull_pipeline,
        pull_timeout_ms=opts.pull_timeout_ms,
    )


@atexit.register
def _close_all() -> None:
    with _lock:
        readers = [r for k, r in _readers.items() if k[0] == os.getpid()]
        _readers.clear()
    for r in readers:
        try:
            r.close()
        except Exception:  # best effort at interpreter exit
            pass
