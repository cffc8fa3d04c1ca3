"""The server's commands of `stoker`: `serve` and `demo`.

The agent's commands (`run`, `doctor`, `upload`, `--version`, and `stoker --help`) have one
implementation, the agent's command line (trainer_agent.cli), which hands `serve` and `demo`
here; `main` hands the agent's commands there, so `python -m backend.cli upload DIR` and
`stoker upload DIR` are the same command."""

import argparse
import logging
import sys
from pathlib import Path

from backend.core.settings import Settings


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    defaults = Settings()
    parser.add_argument("--host", default=defaults.host, help="bind address (default %(default)s)")
    parser.add_argument("--port", type=int, default=defaults.port, help="(default %(default)s)")
    parser.add_argument(
        "--data-dir", type=Path, default=defaults.data_dir, help="where runs are stored"
    )
    parser.add_argument(
        "--database-url", default=defaults.database_url, help="SQLAlchemy URL (default: SQLite)"
    )


def _settings_from(args: argparse.Namespace) -> Settings:
    return Settings(
        host=args.host, port=args.port, data_dir=args.data_dir, database_url=args.database_url
    )


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from backend.core.app import create_app

    settings = _settings_from(args)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    # The event loop gives up the GIL at every socket send and waits to get it back while
    # the writer thread runs Python; with the default 5 ms switch interval, thousands of
    # sends a second left the loop waiting more than working.
    sys.setswitchinterval(settings.switch_interval_s)
    print(f"Stoker UI: http://{settings.host}:{settings.port}/", flush=True)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        ws_max_size=settings.max_frame_bytes,
        ws_per_message_deflate=settings.ws_compression,
        access_log=False,
    )
    return 0


def demo(args: argparse.Namespace) -> int:
    from backend.cli.demo import run_demo

    return run_demo(_settings_from(args), epochs=args.epochs, keep_serving=not args.exit)


def main(argv: list[str] | None = None) -> int:
    from trainer_agent.cli import AGENT_COMMANDS
    from trainer_agent.cli import main as agent_main

    argv = sys.argv[1:] if argv is None else list(argv)
    # The agent's command line takes what is not a server command (it hands those back).
    if not argv or argv[0].startswith("-") or argv[0] in AGENT_COMMANDS:
        return agent_main(argv)
    parser = argparse.ArgumentParser(
        prog="stoker",
        description="Live GPU training monitor: the server's commands.",
        epilog=f"Agent commands: {', '.join(AGENT_COMMANDS)} (see `stoker --help`).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_parser = commands.add_parser("serve", help="run the Stoker server")
    _add_server_flags(serve_parser)
    serve_parser.set_defaults(func=serve)

    demo_parser = commands.add_parser(
        "demo", help="start a server and stream a real Keras training into it"
    )
    _add_server_flags(demo_parser)
    demo_parser.add_argument("--epochs", type=int, default=3, help="epochs per demo run")
    demo_parser.add_argument(
        "--exit", action="store_true", help="stop the server when training ends"
    )
    demo_parser.set_defaults(func=demo)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
