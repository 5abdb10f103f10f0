"""Message filters applied by DefaultMessageStore.get_message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable


@runtime_checkable
class MessageFilter(Protocol):
    """What get_message asks of a filter. Optional attributes it reads when present: `matches_every_unit`
    (True: is_matched_by_consume_queue accepts every tags code, so it is not called) and, with
    is_matched_by_commit_log, `needs_commit_log_match` (False: that stage accepts every record)."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...


@runtime_checkable
class CommitLogMessageFilter(Protocol):
    """Optional second stage (e.g. SQL92): sees the record bytes and its decoded properties."""

    def is_matched_by_commit_log(
        self, msg_buffer: memoryview, properties: Mapping[str, str] | None
    ) -> bool: ...


class TagsCodeFilter:
    """Matches when the CQ unit's tags code is in the subscribed set (`*` = everything)."""

    __slots__ = ("_codes", "matches_every_unit")

    def __init__(self, codes: Iterable[int] | None) -> None:
        self.matches_every_unit = codes is None
        self._codes = frozenset(codes or ())

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.matches_every_unit or tags_code in self._codes
