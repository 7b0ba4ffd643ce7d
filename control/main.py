"""`starforge-control --config FILE`: run the control plane until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from common.config import ConfigError
from common.logs import setup_logging
from common.server import serve_until_signal
from control import config as control_config
from control.app import start_control


async def _serve(cfg: control_config.ControlConfig) -> None:
    app = await start_control(cfg)

    async def on_stop() -> None:
        app.stop_event.set()

    await serve_until_signal(app.server, grace=5.0, on_stop=on_stop)
    await app.stop(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="starforge-control", description="Run the StarForge control plane.")
    parser.add_argument("--config", help="YAML config file (see docs/configuration.md)")
    parser.add_argument("--listen", help="override `listen`, e.g. 127.0.0.1:7070")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    if args.listen:
        env["STARFORGE_LISTEN"] = args.listen
    try:
        cfg = control_config.load(args.config, env)
    except ConfigError as e:
        print(f"starforge-control: configuration error: {e}", file=sys.stderr)
        return 2
    setup_logging(cfg.log_level)
    try:
        asyncio.run(_serve(cfg))
    except ConfigError as e:
        logging.getLogger("starforge.control").error("%s", e)
        print(f"starforge-control: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"starforge-control: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
