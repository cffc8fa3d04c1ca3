"""What keeps other web pages away from a server the user's browser can reach (ASGI middleware).

- **Host allow-list** (bound to loopback): a page on `evil.example` whose name the attacker
  re-points to 127.0.0.1 (DNS rebinding) sends `Host: evil.example`; only loopback names and
  `STOKER_ALLOWED_HOSTS` are answered.
- **Origin check** on both WebSockets and on every write: a browser always says which page
  opened the socket or sent the write; it must be the server's own page or listed in
  `STOKER_ALLOWED_ORIGINS`. A client that sends no Origin (the agent, `stoker top`, scripts)
  is not a browser and passes: its token is what guards it.
- **No "simple" cross-site writes**: a write whose body is text, a form or multipart (what a
  page may send elsewhere without asking first) is refused with 415; the API takes JSON, the
  trace upload `application/octet-stream`.
- **Headers** on every answer: a content security policy, `X-Frame-Options: DENY`,
  `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer` (the first URL may
  carry the token).
"""

import ipaddress
import json
import re
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
API_BROWSERS = {"/docs", "/docs/oauth2-redirect", "/redoc"}
SIMPLE_CONTENT_TYPES = {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"}
_HOST_CHARS = re.compile(r"[A-Za-z0-9.\-:\[\]]+")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def host_name(host_header: str) -> str:
    """The name of a Host header, without its port: `[::1]:8470` → `::1`."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@lru_cache(maxsize=256)  # few distinct names reach a server; parsing one costs ~30 us
def is_loopback_name(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True  # browsers resolve these to loopback themselves, never through DNS
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _netloc(scheme: str, host: str, port: int | None) -> str:
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return host
    return f"{host}:{port}"


def origin_netloc(origin: str) -> str | None:
    """`https://Example.com:443` → `example.com`; None when it is not an origin."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return _netloc(parts.scheme.lower(), host.lower(), port)


def request_netloc(host_header: str) -> str:
    """The Host header as an origin's netloc (its default port dropped)."""
    host = host_header.strip().lower()
    for suffix in (":80", ":443"):
        if host.endswith(suffix):  # the scheme is not known here: either default port
            return host.removesuffix(suffix)
    return host


class BrowserGuard:
    """The checks above, before anything else reads the request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        loopback: bool,
        allowed_hosts: Iterable[str],
        allowed_origins: Iterable[str],
    ) -> None:
        self.app = app
        hosts = {host_name(h) for h in allowed_hosts if h.strip()}
        # None: any Host is answered (bound beyond loopback, no list given).
        self.allowed_hosts: set[str] | None = hosts if (loopback or hosts) else None
        self.allowed_origins = {n for o in allowed_origins if (n := origin_netloc(o))}

    def host_allowed(self, host_header: str) -> bool:
        if self.allowed_hosts is None:
            return True
        name = host_name(host_header)
        return is_loopback_name(name) or name in self.allowed_hosts

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        netloc = origin_netloc(origin)
        if netloc is None:  # "null": a sandboxed frame, a file:// page
            return False
        return netloc == request_netloc(host_header) or netloc in self.allowed_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host, origin, content_type = _request_headers(scope)
        refusal = self._refusal(kind, scope.get("method", ""), host, origin, content_type)
        if refusal is not None:
            status, detail = refusal
            await _refuse(kind, status, detail, scope, receive, send)
            return
        if kind == "websocket":
            await self.app(scope, receive, send)
            return
        # FastAPI's API browsers (/docs, /redoc) load their scripts from a CDN and inline:
        # they get the other headers, not the UI's policy.
        policy = "" if scope.get("path") in API_BROWSERS else content_security_policy(host)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *_security_headers(policy)]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(
        self, kind: str, method: str, host: str, origin: str | None, content_type: str
    ) -> tuple[int, str] | None:
        if not self.host_allowed(host):
            return 403, (
                f"Host {host!r} is not answered here: this server answers its loopback names "
                "(localhost, 127.0.0.1, ::1) and the names in STOKER_ALLOWED_HOSTS"
            )
        writes = kind == "websocket" or method in UNSAFE_METHODS
        if writes and origin is not None and not self.origin_allowed(origin, host):
            return 403, (
                f"Origin {origin!r} may not use this server: only its own pages and the "
                "origins in STOKER_ALLOWED_ORIGINS may"
            )
        if kind == "http" and method in UNSAFE_METHODS:
            media = content_type.split(";")[0].strip().lower()
            if media in SIMPLE_CONTENT_TYPES:
                return 415, (
                    f"Content-Type {media} is not taken: send application/json "
                    "(traces: application/octet-stream)"
                )
        return None


def _request_headers(scope: Scope) -> tuple[str, str | None, str]:
    """The Host, Origin and Content-Type headers, in one pass over the raw headers."""
    host, origin, content_type = "", None, ""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host = value.decode("latin-1")
        elif name == b"origin":
            origin = value.decode("latin-1")
        elif name == b"content-type":
            content_type = value.decode("latin-1")
    return host, origin, content_type


@lru_cache(maxsize=256)
def content_security_policy(host_header: str) -> str:
    """The UI loads its own script and style files and talks to its own server only."""
    sockets = ""
    if _HOST_CHARS.fullmatch(host_header):
        sockets = f" ws://{host_header} wss://{host_header}"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        f"img-src 'self' data: blob:; connect-src 'self'{sockets}; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


@lru_cache(maxsize=256)
def _security_headers(policy: str) -> tuple[tuple[bytes, bytes], ...]:
    csp = ((b"content-security-policy", policy.encode("latin-1")),) if policy else ()
    return (
        *csp,
        (b"x-frame-options", b"DENY"),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
    )


async def _refuse(
    kind: str, status: int, detail: str, scope: Scope, receive: Receive, send: Send
) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if kind == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
