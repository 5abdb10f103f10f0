"""`mqnamesrv [-c FILE] [-p]`: run a NameServer in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import signal

import click
import structlog

from remoting.log import configure_logging
from remoting.loop import run
from remoting.properties import ConfigError, dump_properties

from .config import NamesrvConfig, load_namesrv_config
from .controller import NamesrvController

log = structlog.get_logger(__name__)

# Leave headroom under the contract's 10 s between SIGTERM and exit.
STOP_TIMEOUT_S = 8.0


async def serve(config: NamesrvConfig) -> int:
    """Run a NameServer until SIGTERM/SIGINT; the exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # Installed before start, so a signal that arrives while starting still ends in a clean stop.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    controller = NamesrvController(config)
    try:
        try:
            await controller.start()
        except ConfigError as e:
            click.echo(f"mqnamesrv: {e}", err=True)
            await controller.stop()
            return 1
        await stop.wait()
        log.info("namesrv_shutting_down")
        try:
            await asyncio.wait_for(controller.stop(), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("namesrv_stop_timed_out", timeout_s=STOP_TIMEOUT_S)
        return 0
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


@click.command(name="mqnamesrv", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c",
    "--configFile",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="NameServer config properties file",
)
@click.option("-p", "--printConfigItem", "print_config", is_flag=True, help="Print all config items and exit")
def command(config_file: str | None, print_config: bool) -> int:
    """Apache RocketMQ-compatible NameServer."""
    configure_logging()
    try:
        config = load_namesrv_config(config_file)
    except ConfigError as e:
        click.echo(f"mqnamesrv: {e}", err=True)
        return 1
    if print_config:
        click.echo(dump_properties(config), nl=False)
        return 0
    return run(serve(config))


def main(argv: list[str] | None = None) -> int:
    try:
        rv = command.main(args=argv, prog_name="mqnamesrv", standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code or 0)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        return 1
    return int(rv or 0)
