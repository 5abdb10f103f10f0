"""`mqbroker [-c FILE] [-n ADDR] [-p]`: the broker daemon."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence

import click
import structlog

from broker.config import BrokerConfig
from remoting.log import configure_logging
from remoting.loop import run
from remoting.properties import ConfigError, load_properties_file

log = structlog.get_logger("broker")

# SIGTERM must end the process within 10 s: give the clean shutdown this long, then exit anyway.
SHUTDOWN_BUDGET_S = 8.5


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft limit on open files to the hard one, as the JVM does at start (-XX:+MaxFDLimit),
    which RocketMQ's brokers rely on: every ConsumeQueue and CommitLog file keeps a descriptor open (its
    mapping's), so with 4 queues a topic a soft limit of 1 024 -- the usual default -- runs out at a couple
    of hundred topics, and dispatch then stops on EMFILE for every topic. Returns (soft, hard) afterwards,
    None where there is no such limit."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:  # Linux refuses more than fs.nr_open
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            return soft, hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return soft, hard


def load_config(config_file: str | None, namesrv_addr: str | None) -> BrokerConfig:
    values: dict[str, str] = {}
    source = "command line"
    if config_file:
        values = load_properties_file(config_file)
        source = config_file
    if namesrv_addr:
        values["namesrvAddr"] = namesrv_addr
    elif not values.get("namesrvAddr") and os.environ.get("NAMESRV_ADDR"):
        values["namesrvAddr"] = os.environ["NAMESRV_ADDR"]
    return BrokerConfig.from_values(values, source=source)


async def serve(cfg: BrokerConfig, config_file: str | None) -> int:
    from broker.controller import BrokerController

    controller = BrokerController(cfg, config_file=config_file)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await controller.start()
    except ConfigError:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(controller.stop(), 3.0)
        raise
    await stop.wait()
    log.info("broker_shutting_down")
    try:
        await asyncio.wait_for(controller.stop(), SHUTDOWN_BUDGET_S)
    except TimeoutError:
        log.error("broker_shutdown_timed_out", budget_s=SHUTDOWN_BUDGET_S)
        return 0
    return 0


@click.command(name="mqbroker", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--configFile", "config_file", type=click.Path(dir_okay=False), help="Broker config file (properties).")
@click.option("-n", "--namesrvAddr", "namesrv_addr", help="NameServer address(es), ip:port;ip:port (overrides namesrvAddr).")
@click.option("-p", "--printConfigItem", "print_config", is_flag=True, help="Print the effective config and exit.")
def cli(config_file: str | None, namesrv_addr: str | None, print_config: bool) -> int:
    """Start a broker."""
    try:
        cfg = load_config(config_file, namesrv_addr)
    except ConfigError as e:
        click.echo(f"mqbroker: {e}", err=True)
        return 1
    if print_config:
        click.echo(cfg.to_properties(), nl=False)
        return 0
    configure_logging()
    limits = raise_open_files_limit()
    if limits is not None:
        log.info("open_files_limit", soft=limits[0], hard=limits[1])
    try:
        return run(serve(cfg, config_file))
    except ConfigError as e:
        click.echo(f"mqbroker: {e}", err=True)
        return 1
    except KeyboardInterrupt:
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        rc = cli.main(args=list(argv) if argv is not None else None, prog_name="mqbroker", standalone_mode=False)
    except click.exceptions.Abort:
        return 1
    except click.ClickException as e:
        e.show()
        return e.exit_code
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
