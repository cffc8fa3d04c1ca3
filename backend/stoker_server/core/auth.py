"""Who may do what: three roles, each a bearer token (docs/security.md).

- `agent` delivers runs (the agent WebSocket, `POST /ingest`, profiler reports) and reads
  nothing: its token sits in every training job's environment.
- `viewer` reads: runs, charts, `/metrics`, the live socket.
- `admin` reads too, and edits or deletes runs, manages alert rules and webhooks, and starts
  profiles.

A role whose token is set needs it. A role without a token is open to anyone only where
the server runs open: bound to loopback (the local user; the browser guard keeps web pages
out), or with `--no-auth`. Bound beyond loopback without `--no-auth`, every role gets a token
(made on first start, `token_file`). The admin role is never more open than the viewer's:
with a viewer token and no admin token, the admin actions are off (as Prometheus's admin
API is off unless enabled). Tokens may be given as `sha256:<hex>`, so the server need not
hold them in clear; every presented token is hashed and compared in constant time.
"""

import hashlib
import hmac
import ipaddress
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from fastapi import Depends, WebSocket
from fastapi.responses import JSONResponse
from starlette.requests import HTTPConnection

from stoker_server.core.errors import Forbidden, StokerError, Unauthorized
from stoker_server.core.settings import Settings
from stoker_server.core.token_file import load_or_make_tokens, token_path

log = logging.getLogger("stoker_server")


class Role(StrEnum):
    agent = "agent"
    viewer = "viewer"
    admin = "admin"


SETTING = {Role.agent: "STOKER_AGENT_TOKEN", Role.viewer: "STOKER_VIEW_TOKEN",
           Role.admin: "STOKER_ADMIN_TOKEN"}  # fmt: skip
_HASHED = re.compile(r"sha256:([0-9a-fA-F]{64})")


class TokenSettingError(ValueError):
    """A token setting that cannot be used (a malformed hash); the message names it."""


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class Credential:
    """A configured token, kept as its SHA-256 digest."""

    digest: bytes

    @classmethod
    def parse(cls, value: str, setting: str) -> "Credential":
        """`value` in clear, or as `sha256:<64 hex digits>`."""
        if value.lower().startswith("sha256:"):
            match = _HASHED.fullmatch(value.strip())
            if match is None:
                raise TokenSettingError(
                    f"{setting} starts with 'sha256:' but is not 'sha256:' and 64 hex digits; "
                    "make one with: python -c \"import hashlib,sys; print('sha256:' + "
                    'hashlib.sha256(sys.argv[1].encode()).hexdigest())" TOKEN'
                )
            return cls(bytes.fromhex(match[1]))
        return cls(digest(value))

    def matches(self, presented_digest: bytes) -> bool:
        return hmac.compare_digest(self.digest, presented_digest)


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # any other name may resolve beyond this machine


_WRONG_ROLE = {
    Role.viewer: "reading needs the viewer token (or the admin token)",
    Role.admin: "editing or deleting runs, alert rules and webhooks, and starting profiles "
    "need the admin token (STOKER_ADMIN_TOKEN)",
    Role.agent: "sending runs needs the agent token",
}
_HELD = {
    Role.agent: "the agent token only delivers runs",
    Role.viewer: "the viewer token only reads",
    Role.admin: "the admin token cannot deliver runs",
}


@dataclass(frozen=True)
class AccessPolicy:
    """The roles each presented token grants, built once from the settings."""

    credentials: Mapping[Role, Credential]
    open_roles: frozenset[Role]  # granted to anyone, token or not
    admin_off: bool  # a viewer token and no admin token: nobody is admin
    loopback: bool
    no_auth: bool
    token_file: Path | None = None  # where the tokens made for this server are, if any

    def grants(self, presented: str | None) -> frozenset[Role]:
        roles = set(self.open_roles)
        if presented:
            presented_digest = digest(presented)
            for role, credential in self.credentials.items():
                if credential.matches(presented_digest):
                    roles.add(role)
                    if role == Role.admin:
                        roles.add(Role.viewer)
        return frozenset(roles)

    def require(self, presented: str | None, role: Role) -> frozenset[Role]:
        """The roles `presented` grants; raises unless `role` is one. A missing or unknown
        token is a 401, a valid token of another role (or an admin action on a server with
        no admin token) a 403 saying which token is needed."""
        granted = self.grants(presented)
        if role in granted:
            return granted
        if role == Role.admin and self.admin_off:
            raise Forbidden(
                "this server has no admin token, so editing or deleting runs, managing alert "
                "rules and webhooks and starting profiles are off: set STOKER_ADMIN_TOKEN on "
                "the server"
            )
        held = granted - self.open_roles
        if held:
            strongest = Role.admin if Role.admin in held else next(iter(held))
            raise Forbidden(f"{_HELD[strongest]}; {_WRONG_ROLE[role]}")
        raise Unauthorized(f"a valid {role} token is required (Authorization: Bearer <token>)")

    @property
    def locked(self) -> frozenset[Role]:
        return frozenset(self.credentials)


def _needs_token_file(settings: Settings) -> bool:
    """Bound beyond loopback, not `no_auth`, and some role without a token of its own."""
    given = (settings.agent_token, settings.view_token, settings.admin_token)
    return not is_loopback(settings.host) and not settings.no_auth and not all(given)


def configured_tokens(settings: Settings) -> dict[Role, str]:
    """Every role's token as configured: its setting, else (bound beyond loopback) the one
    made for it in the token file. Values may be hashes (`sha256:...`)."""
    given = {Role.agent: settings.agent_token, Role.viewer: settings.view_token,
             Role.admin: settings.admin_token}  # fmt: skip
    if _needs_token_file(settings):
        made = load_or_make_tokens(settings.data_dir)
        given = {role: value or made[role.value] for role, value in given.items()}
    return {role: value for role, value in given.items() if value}


def tokens_in_clear(settings: Settings) -> dict[Role, str]:
    """The tokens this process can hand to a client (the demo's agent, the printed URL):
    those not given as hashes."""
    return {
        role: value
        for role, value in configured_tokens(settings).items()
        if not value.lower().startswith("sha256:")
    }


def access_policy(settings: Settings) -> AccessPolicy:
    """The policy for `settings`; bound beyond loopback without `no_auth`, the roles with
    no token set take the ones in the data directory's token file (made on first start)."""
    given = configured_tokens(settings)
    credentials = {role: Credential.parse(value, SETTING[role]) for role, value in given.items()}
    admin_off = Role.viewer in credentials and Role.admin not in credentials
    open_roles = frozenset(
        role for role in Role if role not in credentials and not (role == Role.admin and admin_off)
    )
    return AccessPolicy(
        credentials=credentials, open_roles=open_roles, admin_off=admin_off,
        loopback=is_loopback(settings.host), no_auth=settings.no_auth,
        token_file=token_path(settings.data_dir) if _needs_token_file(settings) else None,
    )  # fmt: skip


def presented_token(conn: HTTPConnection) -> str | None:
    """The bearer token from the Authorization header; on the WebSocket routes also the
    `token` query parameter (browsers cannot set headers on a WebSocket). Elsewhere a token in
    the URL is not read: it ends up in logs, histories and Referer headers."""
    header = conn.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    if conn.scope["type"] == "websocket":
        return conn.query_params.get("token")
    return None


def app_access(conn: HTTPConnection) -> AccessPolicy:
    return conn.app.state.access


def check_role(conn: HTTPConnection, role: Role) -> frozenset[Role]:
    """The roles the connection's token grants; raises unless `role` is one."""
    return app_access(conn).require(presented_token(conn), role)


def granted_roles(conn: HTTPConnection) -> frozenset[Role]:
    return app_access(conn).grants(presented_token(conn))


async def refuse_websocket(websocket: WebSocket, error: StokerError) -> None:
    """Refuse a WebSocket handshake as HTTP (its status, `{"detail": ...}`) where the server
    supports denial responses; else a policy-violation close, which clients see as 403."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        body = JSONResponse({"detail": error.detail}, status_code=error.status_code)
        await websocket.send_denial_response(body)
    else:
        await websocket.close(code=1008, reason=error.detail[:120])


def _require_viewer(conn: HTTPConnection) -> None:
    check_role(conn, Role.viewer)


def _require_admin(conn: HTTPConnection) -> None:
    check_role(conn, Role.admin)


def _require_agent(conn: HTTPConnection) -> None:
    check_role(conn, Role.agent)


# Route dependencies: every route lists exactly one (tests/server/test_security.py walks them).
ViewerAuth = Depends(_require_viewer)
AdminAuth = Depends(_require_admin)
AgentAuth = Depends(_require_agent)
ROLE_OF_DEPENDENCY = {_require_viewer: Role.viewer, _require_admin: Role.admin,
                      _require_agent: Role.agent}  # fmt: skip
