"""docker-compose.yml: its structure, and its topology run as local processes (no Docker engine here)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from remoting.properties import load_properties_file, parse_properties
from tests.support.daemons import ROOT, Daemon

COMPOSE = ROOT / "docker-compose.yml"
IMAGE_CONF = "/opt/rocketmq/conf/"  # where the Dockerfile copies conf/


def load() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict[str, dict]:
    return load()["services"]


def host_port(mapping: str) -> int:
    # "127.0.0.1:9876:9876" -> 9876 (the host side)
    parts = mapping.split(":")
    assert len(parts) == 3 and parts[0] == "127.0.0.1", f"port {mapping!r} must be published on localhost only"
    assert parts[1] == parts[2], f"port {mapping!r}: brokers advertise their port, so publish it 1:1"
    return int(parts[1])


def conf_path(command: list[str]) -> Path:
    path = command[command.index("-c") + 1]
    assert path.startswith(IMAGE_CONF), path
    return ROOT / "conf" / path[len(IMAGE_CONF) :]


def test_compose_structure() -> None:
    svc = services()
    namesrvs = sorted(n for n, s in svc.items() if s["command"][0] == "mqnamesrv")
    brokers = sorted(n for n, s in svc.items() if s["command"][0] == "mqbroker")
    assert len(namesrvs) == 2 and brokers == ["broker-a", "broker-b"]
    assert (ROOT / "Dockerfile").is_file()
    ports: list[int] = []
    for name, s in svc.items():
        assert s["build"]["context"] == "." and (ROOT / s["build"]["dockerfile"]).is_file(), name
        cmd = s["command"]
        assert (ROOT / "bin" / cmd[0]).is_file(), f"{name}: {cmd[0]} is not in bin/"
        assert conf_path(cmd).is_file(), f"{name}: missing conf {cmd}"
        assert load_properties_file(conf_path(cmd)), f"{name}: conf does not parse"
        ports += [host_port(p) for p in s["ports"]]
        hc = s["healthcheck"]["test"]
        assert hc[:3] == ["CMD", "mqadmin", "clusterList"], name
    assert len(ports) == len(set(ports)), f"ports not unique: {ports}"
    volumes = load()["volumes"]
    for b in brokers:
        mounts = svc[b]["volumes"]
        assert len(mounts) == 1
        vol, target = mounts[0].split(":")
        assert vol in volumes and target == "/home/rocketmq/store"
        assert parse_properties(conf_path(svc[b]["command"]).read_text())["storePathRootDir"] == target
        ns_addrs = svc[b]["environment"]["NAMESRV_ADDR"].split(";")
        assert sorted(a.split(":")[0] for a in ns_addrs) == namesrvs
        assert set(svc[b]["depends_on"]) == set(namesrvs)
    assert len({m for b in brokers for m in svc[b]["volumes"]}) == len(brokers), "each broker needs its own volume"


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Each compose service's command run as a local process with the file's ports."""
    svc = services()
    started: list[Daemon] = []
    name_of_host = {n: "127.0.0.1" for n in svc}
    try:
        ns_addrs = []
        for name in sorted(svc):
            s = svc[name]
            if s["command"][0] != "mqnamesrv":
                continue
            conf = parse_properties(conf_path(s["command"]).read_text())
            conf["kvConfigPath"] = str(tmp_path / name / "kvConfig.json")
            local = tmp_path / f"{name}.conf"
            local.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
            d = Daemon(name, [sys.executable, str(ROOT / "bin" / "mqnamesrv"), "-c", str(local)])
            started.append(d)
            d.wait_for("listening", 30)
            ns_addrs.append(f"127.0.0.1:{host_port(s['ports'][0])}")
        for name in sorted(svc):
            s = svc[name]
            if s["command"][0] != "mqbroker":
                continue
            conf = parse_properties(conf_path(s["command"]).read_text())
            conf["storePathRootDir"] = str(tmp_path / name)  # the volume
            conf["mappedFileSizeCommitLog"] = str(8 * 1024 * 1024)
            local = tmp_path / f"{name}.properties"
            local.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
            env_addr = s["environment"]["NAMESRV_ADDR"]
            for host in name_of_host:
                env_addr = re.sub(rf"\b{re.escape(host)}\b", name_of_host[host], env_addr)
            d = Daemon(
                name,
                [sys.executable, str(ROOT / "bin" / "mqbroker"), "-c", str(local)],
                env={"NAMESRV_ADDR": env_addr},
            )
            started.append(d)
            d.wait_for("listening", 30)
        yield {"NAMESRV_ADDR": ";".join(ns_addrs)}
    finally:
        for d in reversed(started):
            d.terminate()


def mqadmin(args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bin" / "mqadmin"), *shlex.split(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_compose_topology_as_local_processes(topology: dict[str, str]) -> None:
    env = topology
    # Both brokers registered with (each of) the NameServers.
    deadline_runs = 0
    while True:
        r = mqadmin("clusterList", env)
        if r.returncode == 0 and "broker-a" in r.stdout and "broker-b" in r.stdout:
            break
        deadline_runs += 1
        assert deadline_runs < 20, f"clusterList never showed both brokers:\n{r.stdout}\n{r.stderr}"
    for ns in env["NAMESRV_ADDR"].split(";"):
        r = mqadmin(f"clusterList -n {ns}", {})
        assert r.returncode == 0 and "broker-a" in r.stdout and "broker-b" in r.stdout, r.stdout + r.stderr
    # A message through each broker, then consumed back from each.
    for broker in ("broker-a", "broker-b"):
        r = mqadmin(f"updateTopic -t ComposeTopic -b {'127.0.0.1:10911' if broker == 'broker-a' else '127.0.0.1:10921'}", env)
        assert r.returncode == 0, r.stdout + r.stderr
    for broker in ("broker-a", "broker-b"):
        r = mqadmin(f"sendMessage -t ComposeTopic -p hello-{broker} -b {broker} -i 0", env)
        assert r.returncode == 0 and "SEND_OK" in r.stdout, r.stdout + r.stderr
    for broker in ("broker-a", "broker-b"):
        r = mqadmin(f"consumeMessage -t ComposeTopic -b {broker} -i 0 -o 0 -c 10", env)
        assert r.returncode == 0 and f"hello-{broker}" in r.stdout, r.stdout + r.stderr
