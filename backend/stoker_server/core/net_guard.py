"""Where the server may send requests of its own (webhooks), after OWASP's SSRF guidance.

A webhook URL is a user's input that makes the server connect somewhere. Left alone it can
reach what only the server can: its own loopback, the cloud's metadata service
(169.254.169.254), the private network. So a destination must be public: a URL naming a
loopback, link-local, private, shared, reserved or multicast address, or a name that resolves
to one, is refused when a rule is saved and again at every delivery, after resolving the name,
unless its host is listed in `STOKER_WEBHOOK_ALLOWED_HOSTS`. The delivery then connects to the
very address that was checked (no second lookup a rebinding DNS server could answer
differently). Names are resolved by an injectable resolver, so tests resolve names they own.
"""

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port) → the addresses it resolves to, as text.
Resolver = Callable[[str, int], Awaitable[list[str]]]
SETTING = "STOKER_WEBHOOK_ALLOWED_HOSTS"
# Names of cloud metadata services that need no DNS server to resolve.
METADATA_NAMES = {"metadata", "metadata.google.internal", "instance-data",
                  "instance-data.ec2.internal", "metadata.azure.com"}  # fmt: skip
_DEFAULT_PORTS = {"http": 80, "https": 443}


class DestinationRefused(ValueError):
    """A destination that is not public; the message names the setting that allows it."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of `host` from the system's resolver (off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def redact_url(url: str) -> str:
    """`https://hooks.slack.com/services/T0/B0/secret` → `https://hooks.slack.com/…`: the
    path and query of a webhook URL are its secret, shown to admins only."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "…"
    netloc = parts.netloc.rsplit("@", 1)[-1]  # never the credentials in user:pass@host
    hidden = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{netloc}{hidden}" if parts.scheme else "…"


def not_public(address: IPAddress) -> str | None:
    """Why `address` is no public destination (loopback, metadata, ...), or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return not_public(address.ipv4_mapped)
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_private or not address.is_global:
        return "a private or reserved address"
    return None


def _host_port(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise DestinationRefused(f"{redact_url(url)} is not an http:// or https:// URL")
    return scheme, parts.hostname.lower(), parts.port or _DEFAULT_PORTS[scheme]


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def allowed(host: str, allowed_hosts: Iterable[str]) -> bool:
    return host.lower().strip("[]") in {h.strip().lower().strip("[]") for h in allowed_hosts}


def _refused(url: str, what: str) -> DestinationRefused:
    return DestinationRefused(
        f"{redact_url(url)} is {what}: webhooks go to public addresses only; list its host in "
        f"{SETTING} to allow it"
    )


async def vet_destination(
    url: str,
    *,
    allowed_hosts: Iterable[str],
    resolver: Resolver = system_resolver,
    unresolved_ok: bool = False,
    resolve_timeout_s: float = 5.0,
) -> list[str]:
    """The checked addresses to connect to for `url` (a host listed in `allowed_hosts` is
    resolved but not checked). Raises DestinationRefused for a destination that is not public.
    A name that does not resolve (within `resolve_timeout_s`) raises OSError; with
    `unresolved_ok` (saving a rule: it is checked again at every delivery) it passes, and so
    does an allowed host, unresolved."""
    _scheme, host, port = _host_port(url)
    exempt = allowed(host, allowed_hosts)
    literal = _literal(host)
    if literal is not None:
        if not exempt and (why := not_public(literal)):
            raise _refused(url, why)
        return [str(literal)]
    if exempt and unresolved_ok:
        return []
    if not exempt and (host == "localhost" or host.endswith(".localhost")):
        raise _refused(url, "a loopback address")
    if not exempt and host in METADATA_NAMES:
        raise _refused(url, "a cloud metadata service")
    try:
        addresses = await asyncio.wait_for(resolver(host, port), resolve_timeout_s)
    except (OSError, TimeoutError):
        if unresolved_ok:
            return []
        raise
    if not addresses:
        if unresolved_ok:
            return []
        raise OSError(f"{host} has no address")
    for address in addresses:
        parsed = _literal(address.split("%", 1)[0])
        why = "an address that is not an IP" if parsed is None else not_public(parsed)
        if why and not exempt:
            raise _refused(url, f"resolved to {why}")
    return addresses
