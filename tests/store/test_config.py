"""MessageStoreConfig: RocketMQ key names, 4.9.4 defaults, values as strings from a properties file."""

from __future__ import annotations

import os

from store.config import FlushDiskType, MessageStoreConfig


def test_defaults() -> None:
    c = MessageStoreConfig()
    assert c.storePathRootDir == os.path.join(os.path.expanduser("~"), "store")
    assert c.mappedFileSizeCommitLog == 1073741824
    assert c.mappedFileSizeConsumeQueue == 6000000
    assert c.flushDiskType == FlushDiskType.ASYNC_FLUSH
    assert (c.flushIntervalCommitLog, c.flushCommitLogLeastPages, c.flushCommitLogThoroughInterval) == (
        500,
        4,
        10000,
    )
    assert c.syncFlushTimeout == 5000
    assert (c.fileReservedTime, c.deleteWhen, c.diskMaxUsedSpaceRatio) == (72, "04", 75)
    assert c.maxMessageSize == 4194304 and c.checkCRCOnRecover
    assert (c.maxHashSlotNum, c.maxIndexNum) == (5000000, 20000000)
    assert c.maxTransferCountOnMessageInMemory == 32 and c.cleanResourceInterval == 10000
    assert c.messageIndexEnable
    assert c.store_path_commit_log() == os.path.join(c.storePathRootDir, "commitlog")
    assert c.store_checkpoint_path().endswith("checkpoint") and c.abort_file_path().endswith("abort")


def test_string_values_and_unknown_keys() -> None:
    c = MessageStoreConfig.model_validate(
        {
            "storePathRootDir": "/data/store",
            "mappedFileSizeCommitLog": "65536",
            "flushDiskType": "SYNC_FLUSH",
            "messageIndexEnable": "false",
            "deleteWhen": "04;16",
            "diskMaxUsedSpaceRatio": "99",
            "brokerName": "ignored-here",
        }
    )
    assert c.mappedFileSizeCommitLog == 65536 and c.is_sync_flush()
    assert c.messageIndexEnable is False and c.deleteWhen == "04;16"
    assert c.disk_max_used_space_ratio() == 95  # clamped like Java
    assert MessageStoreConfig(deleteWhen=4).deleteWhen == "4"  # type: ignore[arg-type]
    assert MessageStoreConfig(mappedFileSizeConsumeQueue=1010).mapped_file_size_consume_queue() == 1000


def test_store_does_not_import_broker_side_packages() -> None:
    import subprocess
    import sys

    code = (
        "import sys, store, store.message_store; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'broker', 'namesrv', 'client', 'spark_connector'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
