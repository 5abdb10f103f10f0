"""RocketMQ's MQVersion: the `version` of every RemotingCommand is an ordinal of its Version enum.

Java's tools print it by name (`MQVersion.getVersionDesc`: 409 is V4_9_8). The enum's first 28 names are
irregular; from V3_0_7_SNAPSHOT on it is a SNAPSHOT and a release for each version in turn, up to V5_9_9,
then HIGHER_VERSION for anything newer.
"""

from __future__ import annotations

from functools import cache

__all__ = ["CURRENT_VERSION", "V3_0_7_SNAPSHOT", "version_desc", "version_ordinal"]

_FIRST = (
    "V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1", "V3_0_0_BETA1", "V3_0_0_BETA2", "V3_0_0_BETA3", "V3_0_0_BETA4",
    "V3_0_0_BETA5", "V3_0_0_BETA6_SNAPSHOT", "V3_0_0_BETA6", "V3_0_0_BETA7_SNAPSHOT", "V3_0_0_BETA7",
    "V3_0_0_BETA8_SNAPSHOT", "V3_0_0_BETA8", "V3_0_0_BETA9_SNAPSHOT", "V3_0_0_BETA9", "V3_0_0_FINAL",
    "V3_0_1_SNAPSHOT", "V3_0_1", "V3_0_2_SNAPSHOT", "V3_0_2", "V3_0_3_SNAPSHOT", "V3_0_3", "V3_0_4_SNAPSHOT",
    "V3_0_4", "V3_0_5_SNAPSHOT", "V3_0_5", "V3_0_6_SNAPSHOT", "V3_0_6",
)


def _releases() -> list[str]:
    """The regular part's releases, in enum order: 3.0.7-3.0.15, 3.1.x and 3.2.x from 0, 3.3-3.9 from 1,
    then 4.0.0-5.9.9 (patches 0-9)."""
    out = [f"V3_0_{p}" for p in range(7, 16)]
    for minor in range(1, 10):
        out += [f"V3_{minor}_{p}" for p in range(0 if minor <= 2 else 1, 10)]
    out += [f"V{major}_{minor}_{p}" for major in (4, 5) for minor in range(10) for p in range(10)]
    return out


@cache
def _names() -> tuple[str, ...]:
    names = list(_FIRST)
    for release in _releases():
        names += [f"{release}_SNAPSHOT", release]
    names.append("HIGHER_VERSION")
    return tuple(names)


def version_desc(version: int) -> str:
    """The enum name of a version ordinal (an unknown one as its number)."""
    names = _names()
    return names[version] if 0 <= version < len(names) else str(version)


def version_ordinal(name: str) -> int:
    return _names().index(name)


V3_0_7_SNAPSHOT = version_ordinal("V3_0_7_SNAPSHOT")  # the oldest client that answers consumer status
CURRENT_VERSION = version_ordinal("V4_9_4")  # what this project's clients and brokers say they are
