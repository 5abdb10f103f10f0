"""MQVersion ordinals by name, as RocketMQ 4.9's MQVersion.getVersionDesc gives them (checked against its enum:
613 names, V3_0_0_SNAPSHOT to V5_9_9 and HIGHER_VERSION)."""

from remoting.command import DEFAULT_VERSION
from remoting.version import V3_0_7_SNAPSHOT, version_desc, version_ordinal


def test_version_names_match_rocketmq() -> None:
    assert [version_desc(v) for v in (0, 15, 27, 28, 29, 45, 46)] == [
        "V3_0_0_SNAPSHOT", "V3_0_0_FINAL", "V3_0_6", "V3_0_7_SNAPSHOT", "V3_0_7", "V3_0_15", "V3_1_0_SNAPSHOT"]
    # what Java's tools print for RocketMQ's 4.9 clients and for ours
    assert (version_desc(395), version_desc(401), version_desc(409)) == ("V4_9_1", "V4_9_4", "V4_9_8")
    assert version_desc(DEFAULT_VERSION) == "V4_9_4" and V3_0_7_SNAPSHOT == 28
    assert (version_desc(612), version_desc(613), version_desc(-1)) == ("HIGHER_VERSION", "613", "-1")
    assert version_ordinal("V4_1_0_SNAPSHOT") == 232  # the version Java's clients test for SQL92 support
