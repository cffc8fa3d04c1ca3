"""The `stoker` command. The agent's commands (`run`, `doctor`, `upload`, `top`, `--version`) need
only the base install; the server's (`serve`, `demo`) are handed to the server's command line,
which `stoker[server]` installs."""

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer_agent.config import ServerSetting

AGENT_COMMANDS = ("run", "doctor", "upload", "top")
SERVER_INSTALL = "pip install 'stoker[server]'"


def stoker_version() -> str:
    try:
        return version("stoker")
    except PackageNotFoundError:  # running from a source tree that was never installed
        from trainer_agent import __version__

        return __version__


def _server_main(argv: list[str]) -> int:
    try:
        from stoker_server.cli import main as server_main
    except ImportError as error:
        missing = error.name or str(error)
        print(
            f"stoker {argv[0]}: the server is not installed (missing module {missing!r}).\n"
            f"Install it with: {SERVER_INSTALL}",
            file=sys.stderr,
        )
        return 1
    return server_main(argv)


def _checked_server(command: str, server: str | None) -> "ServerSetting | None":
    """`--server`, else `STOKER_SERVER`, checked before anything runs: a value that is not a
    URL is refused here (None), with one line naming it and the fix; `host:port` is taken as
    `http://host:port`, with one line saying so."""
    from trainer_agent.config import server_setting

    setting = server_setting(server, argument="--server")
    if setting.problem:
        print(f"stoker {command}: {setting.problem}", file=sys.stderr)
        return None
    if setting.notice:
        print(f"stoker {command}: {setting.notice}", file=sys.stderr)
    return setting


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stoker",
        description="Live GPU training monitor.",
        epilog=f"Server commands (need {SERVER_INSTALL}): serve, demo. See `stoker serve --help`.",
    )
    parser.add_argument("--version", action="version", version=f"stoker {stoker_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run_parser = commands.add_parser(
        "run",
        help="run a training script unmodified, every Keras fit monitored",
        usage="stoker run [--name N] [--project P] [--tag T ...] [--server URL] "
        "-- python train.py ARGS",
    )
    run_parser.add_argument("--name", default=None, help="run name (default: a random id)")
    run_parser.add_argument("--project", default=None, help="(default: default)")
    run_parser.add_argument("--tag", action="append", default=[], help="a tag; repeatable")
    run_parser.add_argument("--server", default=None, help="default: STOKER_SERVER")
    run_parser.add_argument(
        "script", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command to run"
    )

    commands.add_parser(
        "doctor", help="check the NVIDIA driver, NVML, CUDA/cuDNN/TensorFlow match and GPUs"
    )

    upload_parser = commands.add_parser(
        "upload", help="send runs the agent spooled to disk while the server was unreachable"
    )
    upload_parser.add_argument(
        "directory", type=Path, help="a spooled run directory, or the spool directory"
    )
    upload_parser.add_argument("--server", default=None, help="default: STOKER_SERVER")
    upload_parser.add_argument("--token", default=None, help="default: STOKER_AGENT_TOKEN")

    top_parser = commands.add_parser(
        "top", help="a live terminal view of the server's running runs (q quits)"
    )
    top_parser.add_argument("--server", default=None, help="default: STOKER_SERVER")
    top_parser.add_argument(
        "--token", default=None, help="default: STOKER_VIEW_TOKEN, then STOKER_ADMIN_TOKEN"
    )
    top_parser.add_argument("--once", action="store_true", help="print one frame and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and not argv[0].startswith("-") and argv[0] not in AGENT_COMMANDS:
        return _server_main(argv)
    command: list[str] = []
    if argv[:1] == ["run"] and "--" in argv:  # options before `--`, the command after it
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        from trainer_agent.cli.doctor import main as run_doctor

        return run_doctor()
    setting = _checked_server(args.command, args.server)
    if setting is None:
        return 2
    # The checked URL (`http://` added) goes on, also when it came from STOKER_SERVER.
    server = setting.url if setting.source else None
    if args.command == "run":
        from trainer_agent.capture.run import run

        return run(
            command or args.script, run_name=args.name, project=args.project, tags=args.tag,
            server=server,
        )  # fmt: skip
    if args.command == "top":
        from trainer_agent.top import main as run_top

        return run_top(server=setting.url, token=args.token, once=args.once)
    from trainer_agent.delivery.upload import main as run_upload

    return run_upload(args.directory, server=server, token=args.token)


if __name__ == "__main__":
    sys.exit(main())
