"""The `stoker` command: one parser for every command, each command's code imported only when
it runs. The agent's commands (`run`, `tune`, `doctor`, `upload`, `top`, `--version`) need only
the base install; the server's (`serve`, `demo`) are stoker_server.cli's, which `stoker[server]`
installs (without it, they say what to install). `stoker --help` imports neither the server
nor TensorFlow. `python -m stoker_server.cli` is the same command."""

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer_agent.config import ServerSetting

SERVER_INSTALL = "pip install 'stoker[server]'"
# The commands that run a command given after `--`.
COMMAND_RUNNERS = ("run", "tune")
# The server's flags and their defaults, as `--help` shows them (the agent side cannot read the
# server's Settings, which need the server installed; tests/unit/test_cli.py compares them).
SERVER_FLAGS = (
    ("--host", "STOKER_HOST", "127.0.0.1", "the address to listen on"),
    ("--port", "STOKER_PORT", "8470", "the port"),
    ("--data-dir", "STOKER_DATA_DIR", "~/.stoker", "where runs are stored"),
    ("--database-url", "STOKER_DATABASE_URL", "an SQLite file in the data directory",
     "an SQLAlchemy URL (postgresql+psycopg://... for PostgreSQL)"),
)  # fmt: skip


def stoker_version() -> str:
    try:
        return version("stoker")
    except PackageNotFoundError:  # running from a source tree that was never installed
        from trainer_agent import __version__

        return __version__


def _server_command(args: argparse.Namespace) -> int:
    """`serve` or `demo`, from the server's package."""
    try:
        from stoker_server.cli import main as server
    except ImportError as error:
        missing = error.name or str(error)
        print(
            f"stoker {args.command}: the server is not installed (missing module {missing!r}).\n"
            f"Install it with: {SERVER_INSTALL}",
            file=sys.stderr,
        )
        return 1
    return server.serve(args) if args.command == "serve" else server.demo(args)


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


def _add_server_flags(parser: argparse.ArgumentParser) -> None:
    for flag, env, default, meaning in SERVER_FLAGS:
        parser.add_argument(
            flag,
            type=Path if flag == "--data-dir" else int if flag == "--port" else str,
            default=None,
            help=f"{meaning} (default: {env}, else {default})",
        )


def _add_no_auth_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without tokens even beyond loopback (anyone who reaches it may read, "
        "delete and deliver; said at start); default: STOKER_NO_AUTH, else off: a server bound "
        "beyond loopback makes its tokens on first start",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `stoker` command line: every command, agent's and server's."""
    parser = argparse.ArgumentParser(prog="stoker", description="Live GPU training monitor.")
    parser.add_argument("--version", action="version", version=f"stoker {stoker_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_parser = commands.add_parser(
        "serve", help=f"run the Stoker server (needs {SERVER_INSTALL})"
    )
    _add_server_flags(serve_parser)
    _add_no_auth_flag(serve_parser)

    demo_parser = commands.add_parser(
        "demo",
        help="start a server and stream a real Keras training into it (needs the server)",
        description="Start a Stoker server of its own, on a fresh data directory (only the "
        "demo's runs show), and train a small Keras model twice into it: behind a fed input "
        "pipeline, then a starved one, live for a few minutes.",
    )
    demo_parser.add_argument("--host", default="127.0.0.1", help="bind address (%(default)s)")
    demo_parser.add_argument(
        "--port", type=int, default=None, help="(default 8470, or the next free port after it)"
    )
    demo_parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep the demo's runs here, beside any already there (default: a fresh directory)",
    )
    demo_parser.add_argument(
        "--database-url", default=None, help="SQLAlchemy URL (default: SQLite in the data dir)"
    )
    demo_parser.add_argument(
        "--server",
        default=None,
        metavar="URL",
        help="stream into this running server instead of starting one (its runs show too)",
    )
    _add_no_auth_flag(demo_parser)
    demo_parser.add_argument("--epochs", type=int, default=3, help="epochs per demo run")
    demo_parser.add_argument(
        "--exit", action="store_true", help="stop the server when training ends"
    )
    demo_parser.add_argument(
        "--live-minutes",
        type=float,
        default=3.0,
        help="how long the starved demo run stays live (Ctrl-C ends it sooner; 0: --epochs)",
    )

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

    _add_tune_parser(commands)

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
    top_parser.add_argument(
        "--all", action="store_true", help="ended runs too, with their status (the `a` key)"
    )
    top_parser.add_argument(
        "--run", type=int, default=None, metavar="ID",
        help="open this run (running or ended), as Enter does",
    )  # fmt: skip
    return parser


def _add_tune_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from trainer_agent.tune import DEFAULT_STEPS  # the package alone: no module of it loads

    tune_parser = commands.add_parser(
        "tune",
        help="measure Stoker's advice on the script's own pipeline before editing a line",
        usage="stoker tune [--steps N] [--only ADVICE] [--cache-memory SIZE] [--project P] "
        "[--server URL] -- python train.py ARGS",
        description="Runs the script's first fit for N steps as it is, then once per change "
        "Stoker advises (applied inside the process; the script file is never touched), "
        "repeats the best, and prints the table: steps/s, input wait, speed-up and the line "
        "to edit. Each trial is a run of a tune group on the server.",
    )
    tune_parser.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help="steps per trial (default %(default)s)"
    )
    tune_parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="ADVICE",
        help="try only these: parallel, prefetch, autotune, steps_per_execution, cache "
        "(comma-separated or repeated)",
    )
    tune_parser.add_argument(
        "--cache-memory",
        default=None,
        metavar="SIZE",
        help="the most a cache() may hold, e.g. 2G (default: a quarter of the free memory)",
    )
    tune_parser.add_argument("--project", default=None, help="the trials' project")
    tune_parser.add_argument("--server", default=None, help="default: STOKER_SERVER")
    tune_parser.add_argument("--token", default=None, help="default: STOKER_AGENT_TOKEN")
    tune_parser.add_argument(
        "script", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command to run"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command: list[str] = []
    if argv[:1] and argv[0] in COMMAND_RUNNERS and "--" in argv:  # options, `--`, the command
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = build_parser().parse_args(argv)
    if args.command in ("serve", "demo"):
        return _server_command(args)
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
    if args.command == "tune":
        from trainer_agent.tune.command import main as run_tune

        return run_tune(
            command or args.script, steps=args.steps, only=args.only, server=server,
            token=args.token, project=args.project, cache_memory=args.cache_memory,
        )  # fmt: skip
    if args.command == "top":
        from trainer_agent.top import main as run_top

        return run_top(
            server=setting.url, token=args.token, once=args.once, show_ended=args.all,
            run_id=args.run,
        )  # fmt: skip
    from trainer_agent.delivery.upload import main as run_upload

    return run_upload(args.directory, server=server, token=args.token)


if __name__ == "__main__":
    sys.exit(main())
