"""The `stoker` command: `serve`, `demo`, `doctor`, `upload`."""

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


def doctor(args: argparse.Namespace) -> int:
    from trainer_agent.doctor import main as run_doctor

    return run_doctor()


def upload(args: argparse.Namespace) -> int:
    from trainer_agent.upload import main as run_upload

    return run_upload(args.directory, server=args.server, token=args.token)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stoker", description="Live GPU training monitor.")
    commands = parser.add_subparsers(dest="command", required=True)

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

    doctor_parser = commands.add_parser(
        "doctor", help="check the NVIDIA driver, NVML, CUDA/cuDNN/TensorFlow match and GPUs"
    )
    doctor_parser.set_defaults(func=doctor)

    upload_parser = commands.add_parser(
        "upload", help="send runs the agent spooled to disk while the server was unreachable"
    )
    upload_parser.add_argument(
        "directory", type=Path, help="a spooled run directory, or the spool directory"
    )
    upload_parser.add_argument("--server", default=None, help="default: STOKER_SERVER")
    upload_parser.add_argument("--token", default=None, help="default: STOKER_AGENT_TOKEN")
    upload_parser.set_defaults(func=upload)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
