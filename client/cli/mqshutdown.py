"""`mqshutdown namesrv|broker`: SIGTERM the local NameServer or broker processes (like RocketMQ's script).

Processes are found through /proc/<pid>/cmdline: a broker's command line contains `mqbroker`
or `broker.cli`, a NameServer's `mqnamesrv` or `namesrv.cli`. Prints the PIDs signalled, or
"No mqbroker running." / "No mqnamesrv running."; exits 0 either way (non-zero only on a bad
argument or when a signal cannot be delivered).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import click

KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "namesrv": ("mqnamesrv", ("mqnamesrv", "namesrv.cli")),
    "broker": ("mqbroker", ("mqbroker", "broker.cli")),
}


def _cmdline(pid_dir: Path) -> list[str]:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _matches(argv: list[str], needles: tuple[str, ...]) -> bool:
    if not argv:
        return False
    for arg in argv:
        name = os.path.basename(arg)
        if name in needles:  # the launcher script or the console script
            return True
        if arg in needles:  # python -m namesrv.cli
            return True
        if any(arg.endswith("/" + n) for n in needles):
            return True
    # `python -c "from broker.cli import main"` style launchers
    joined = " ".join(argv)
    return any(f"{n.split('.')[0]}.cli import" in joined for n in needles if n.endswith(".cli"))


def find_pids(kind: str, proc: Path = Path("/proc")) -> list[int]:
    """PIDs of local processes of that kind, excluding this process and its parents' shells."""
    _label, needles = KINDS[kind]
    me = os.getpid()
    out = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        if pid == me:
            continue
        argv = _cmdline(d)
        if argv and "mqshutdown" in os.path.basename(argv[1] if len(argv) > 1 else argv[0]):
            continue
        if _matches(argv, needles):
            out.append(pid)
    return sorted(out)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("kind", type=click.Choice(sorted(KINDS)))
def cli(kind: str) -> int:
    """Send SIGTERM to the local mqnamesrv or mqbroker processes."""
    label, _ = KINDS[kind]
    pids = find_pids(kind)
    if not pids:
        click.echo(f"No {label} running.")
        return 0
    failed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        except PermissionError as e:
            click.echo(f"mqshutdown: cannot signal {pid}: {e.strerror}", err=True)
            failed += 1
    click.echo(f"The {label}({' '.join(str(p) for p in pids)}) is running...")
    click.echo(f"Send shutdown request to {label}({' '.join(str(p) for p in pids)}) OK")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = cli.main(args=args, prog_name="mqshutdown", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.ClickException as e:
        e.show()
        return int(e.exit_code)
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
