"""The server's commands of `stoker`, `serve` and `demo`: what they do once the one `stoker`
parser (trainer_agent/cli/main.py) has read their flags."""

import argparse
import contextlib
import logging
import socket
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic import ValidationError

from stoker_server.core.settings import Settings

if TYPE_CHECKING:
    from stoker_server.core.auth import AccessPolicy


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings: the flags given, else `STOKER_*` variables, else the defaults. Settings
    it cannot use stop the command with one line per setting (exit 2)."""
    flags = {
        name: getattr(args, name)
        for name in ("host", "port", "data_dir", "database_url")
        if getattr(args, name, None) is not None
    }
    if getattr(args, "no_auth", False):  # the flag turns it on; without it STOKER_NO_AUTH
        flags["no_auth"] = True
    try:
        return Settings(**flags)
    except ValidationError as error:
        for problem in error.errors():
            where = ".".join(str(part) for part in problem["loc"]) or "settings"
            field = f"STOKER_{where.upper()}" if problem["loc"] else where
            print(f"stoker {args.command}: {field}: {problem['msg']}", file=sys.stderr)
        raise SystemExit(2) from None


class StartupFailed(Exception):
    """`stoker serve` cannot start; the message is the one line it prints."""


def check_data_dir(data_dir: Path) -> None:
    """The data directory exists (created if missing) and a file can be created in it: tried,
    not read off the mode bits, which root ignores."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StartupFailed(
            f"cannot create the data directory {data_dir} ({error.strerror or error}); "
            "set --data-dir or STOKER_DATA_DIR to a writable directory"
        ) from None
    try:
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".stoker-write-check-"):
            pass
    except OSError as error:
        raise StartupFailed(
            f"cannot write in the data directory {data_dir} ({error.strerror or error}); "
            "set --data-dir or STOKER_DATA_DIR to a writable directory"
        ) from None


def listen(host: str, port: int) -> list[socket.socket]:
    """Bound, listening sockets for `host:port` (every address the name has), before anything
    else starts: a port in use is one line, not a traceback after the URL was printed."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(
            (i[0], i[1], i[2], "", i[4]) for i in infos
        ):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio's (and so uvicorn's) own binding does
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError as error:
        for sock in sockets:
            sock.close()
        raise StartupFailed(f"cannot listen on {where} ({error.strerror or error})") from None
    return sockets


def open_database(settings: Settings) -> Any:
    """The engine, its schema migrated; a failure is one line naming the database."""
    from stoker_server.core.db import make_engine

    try:
        return make_engine(settings)
    except Exception as error:
        url = settings.resolved_database_url()
        with contextlib.suppress(Exception):
            from sqlalchemy.engine import make_url

            url = make_url(url).render_as_string(hide_password=True)
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise StartupFailed(f"cannot open the database {url} ({reason})") from None


def check_access(settings: Settings) -> "AccessPolicy":
    """Who may do what; bound beyond loopback, the tokens made on first start. A token setting
    that cannot be used, or a token file that cannot be read or written, is one line."""
    from stoker_server.core.auth import TokenSettingError, access_policy

    try:
        return access_policy(settings)
    except TokenSettingError as error:
        raise StartupFailed(str(error)) from None
    except OSError as error:
        raise StartupFailed(f"cannot keep the access tokens ({error})") from None


def announce_access(settings: Settings, access: "AccessPolicy", port: int) -> str:
    """Say who may reach the server, and return the URL to print (with the viewer token when
    reading needs one, as Jupyter prints its URL)."""
    from stoker_server.core.auth import Role, tokens_in_clear

    log = logging.getLogger("stoker_server")
    wildcard = settings.host in ("0.0.0.0", "::", "")
    host = "127.0.0.1" if wildcard else settings.host
    url = f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
    if settings.no_auth and not access.loopback:
        log.warning(
            "--no-auth: serving %s without tokens: anyone who can reach it may read every "
            "run, edit or delete runs, change alert rules and webhooks and deliver runs",
            settings.host,
        )
    elif access.loopback and not access.locked:
        log.info("no tokens set: open to this machine's users only (bound to %s)", settings.host)
    if access.token_file is not None:
        log.warning(
            "bound to %s: every request needs a token; the viewer, admin and agent tokens "
            "are in %s (give training jobs STOKER_AGENT_TOKEN from it)",
            settings.host, access.token_file,
        )  # fmt: skip
    viewer = tokens_in_clear(settings).get(Role.viewer)
    if Role.viewer in access.locked and viewer:
        url += f"?token={quote(viewer, safe='')}"
    if wildcard:
        log.info("listening on every address: use this machine's name instead of %s", host)
    return url


def serve(args: argparse.Namespace) -> int:
    """Check the data directory, bind, open the database, then serve; the URL is printed once
    the server answers on it. Anything that stops it starting is one line on stderr, exit 1."""
    import uvicorn

    from stoker_server.service.app import create_app

    settings = settings_from(args)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        if not settings.database_url:  # SQLite under the data directory
            check_data_dir(settings.data_dir)
        access = check_access(settings)
        sockets = listen(settings.host, settings.port)
        try:
            engine = open_database(settings)
        except StartupFailed:
            for sock in sockets:
                sock.close()
            raise
    except StartupFailed as failure:
        print(f"stoker serve: {failure}", file=sys.stderr, flush=True)
        return 1
    # The event loop gives up the GIL at every socket send and waits to get it back while
    # the writer thread runs Python; with the default 5 ms switch interval, thousands of
    # sends a second left the loop waiting more than working.
    sys.setswitchinterval(settings.switch_interval_s)
    port = sockets[0].getsockname()[1]
    url = announce_access(settings, access, port)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:  # listening, and the app's startup is done
                print(f"Stoker UI: {url}", flush=True)

    server = Server(
        uvicorn.Config(
            create_app(settings, engine=engine),
            host=settings.host,
            port=port,
            log_level=settings.log_level,
            ws_max_size=settings.max_frame_bytes,
            ws_per_message_deflate=settings.ws_compression,
            access_log=False,
        )
    )
    server.run(sockets=sockets)
    return 0 if server.started else 1


def demo(args: argparse.Namespace) -> int:
    from stoker_server.cli.demo import demo_place, run_demo

    place = demo_place(
        host=args.host, port=args.port, data_dir=args.data_dir,
        database_url=args.database_url, server=args.server, no_auth=args.no_auth,
    )  # fmt: skip
    return run_demo(
        place,
        epochs=args.epochs,
        keep_serving=not args.exit,
        live_minutes=args.live_minutes,
    )
