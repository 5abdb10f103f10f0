"""MessageStoreConfig: RocketMQ's store keys (camelCase, as in broker.conf) with 4.9.4 defaults."""

from __future__ import annotations

import os
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .index_service import IndexFile


class FlushDiskType(StrEnum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


CQ_STORE_UNIT_SIZE = 20


def _default_root() -> str:
    return os.path.join(os.path.expanduser("~"), "store")


class MessageStoreConfig(BaseModel):
    """Values may arrive as strings from a properties file; pydantic coerces them."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True, use_enum_values=False)

    storePathRootDir: str = _default_root()
    storePathCommitLog: str | None = None
    storePathConsumeQueue: str | None = None
    storePathIndex: str | None = None
    storeCheckpoint: str | None = None
    abortFile: str | None = None

    # A commit log file of at least a page; a consume queue file of at least one unit (Java takes any value
    # and fails later, on a put or a division by the unit count).
    mappedFileSizeCommitLog: int = Field(default=1024 * 1024 * 1024, ge=4096)
    mappedFileSizeConsumeQueue: int = Field(default=300000 * CQ_STORE_UNIT_SIZE, ge=CQ_STORE_UNIT_SIZE)

    flushDiskType: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    brokerRole: BrokerRole = BrokerRole.ASYNC_MASTER
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushCommitLogThoroughInterval: int = 1000 * 10
    flushCommitLogTimed: bool = True
    syncFlushTimeout: int = 1000 * 5
    flushIntervalConsumeQueue: int = 1000
    flushConsumeQueueLeastPages: int = 2
    flushConsumeQueueThoroughInterval: int = 1000 * 60

    cleanResourceInterval: int = 10000
    deleteCommitLogFilesInterval: int = 100
    deleteConsumeQueueFilesInterval: int = 100
    destroyMapedFileIntervalForcibly: int = 1000 * 120
    redeleteHangedFileInterval: int = 1000 * 120
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75
    fileReservedTime: int = 72
    cleanFileForciblyEnable: bool = True
    # Java reads these two from system properties (rocketmq.broker.diskSpace*Ratio).
    diskSpaceWarningLevelRatio: float = 0.90
    diskSpaceCleanForciblyRatio: float = 0.85

    maxMessageSize: int = Field(default=1024 * 1024 * 4, ge=1)
    checkCRCOnRecover: bool = True
    maxTransferBytesOnMessageInMemory: int = 1024 * 256
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInDisk: int = 1024 * 64
    maxTransferCountOnMessageInDisk: int = 8
    accessMessageInMemoryMaxRatio: int = 40

    messageIndexEnable: bool = True
    messageIndexSafe: bool = False
    maxHashSlotNum: int = Field(default=5000000, ge=1)
    maxIndexNum: int = Field(default=5000000 * 4, ge=1)
    maxMsgsNumBatch: int = 64
    defaultQueryMaxNum: int = 32

    osPageCacheBusyTimeOutMills: int = 1000
    putMsgIndexHightWater: int = 600000
    messageDelayLevel: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    duplicationEnable: bool = False
    offsetCheckInSlave: bool = False
    # Not in Java: allocate commit log blocks up front so a full disk fails at file creation
    # (CREATE_MAPEDFILE_FAILED) instead of as SIGBUS on an mmap write. Consume queue files (one per
    # queue) stay sparse, as in Java.
    preallocateMappedFile: bool = True
    # Java's key, our own cheaper mechanism (default on here): a thread faults the 32 MiB ahead of the
    # commit log writer into its mapping (read-only: no disk writes) whenever the writer has used half of
    # it or 10 s have passed, and the rest of the writer's file and the next one while the broker is idle,
    # so the event loop's writes find their pages (see warm_ahead.py). Java writes zeros and mlocks instead.
    warmMapedFileEnable: bool = True

    @model_validator(mode="after")
    def _index_file_fits(self) -> MessageStoreConfig:
        # Java sizes an index file in an int: beyond 2 GiB it overflows there; here it would be a file that
        # size made at start.
        size = IndexFile.file_size_for(self.maxHashSlotNum, self.maxIndexNum)
        if size > 2**31 - 1:
            raise ValueError(f"keys 'maxHashSlotNum' ({self.maxHashSlotNum}) and 'maxIndexNum' ({self.maxIndexNum}) "
                             f"make an index file of {size} bytes, over 2 GiB")
        return self

    @field_validator("deleteWhen", mode="before")
    @classmethod
    def _when_str(cls, v: object) -> object:
        return str(v) if isinstance(v, int) else v

    # ----------------------------------------------------------------------------- derived paths

    def store_path_commit_log(self) -> str:
        return self.storePathCommitLog or os.path.join(self.storePathRootDir, "commitlog")

    def store_path_consume_queue(self) -> str:
        return self.storePathConsumeQueue or os.path.join(self.storePathRootDir, "consumequeue")

    def store_path_index(self) -> str:
        return self.storePathIndex or os.path.join(self.storePathRootDir, "index")

    def store_checkpoint_path(self) -> str:
        return self.storeCheckpoint or os.path.join(self.storePathRootDir, "checkpoint")

    def abort_file_path(self) -> str:
        return self.abortFile or os.path.join(self.storePathRootDir, "abort")

    def mapped_file_size_consume_queue(self) -> int:
        # Java rounds the CQ file size to a whole number of units.
        return (self.mappedFileSizeConsumeQueue // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    def disk_max_used_space_ratio(self) -> int:
        # Java clamps to [10, 95].
        return min(95, max(10, self.diskMaxUsedSpaceRatio))

    def is_sync_flush(self) -> bool:
        return self.flushDiskType == FlushDiskType.SYNC_FLUSH
