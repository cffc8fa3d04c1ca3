"""The tokens a server bound beyond loopback makes on its first start, as Jupyter does.

They live in `<data_dir>/tokens.json` (mode 0600, written whole or not at all), one per role,
and are read again at every later start, so the URLs and the agents' settings stay valid.
A token set in the environment takes precedence over the file's.
"""

import json
import logging
import os
import secrets
import stat
from pathlib import Path

log = logging.getLogger("stoker_server")

TOKEN_FILE = "tokens.json"
ROLES = ("viewer", "admin", "agent")


def token_path(data_dir: Path) -> Path:
    return Path(data_dir) / TOKEN_FILE


def load_or_make_tokens(data_dir: Path) -> dict[str, str]:
    """The tokens by role; made (every role's) when the file is missing or lacks one."""
    path = token_path(data_dir)
    tokens: dict[str, str] = {}
    if path.exists():
        _keep_private(path)
        try:
            loaded = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise OSError(
                f"cannot read the token file {path} ({error}): fix or remove it"
            ) from None
        tokens = {role: loaded[role] for role in ROLES if isinstance(loaded.get(role), str)}
    if all(tokens.get(role) for role in ROLES):
        return tokens
    made = {role: tokens.get(role) or secrets.token_urlsafe(32) for role in ROLES}
    if not _write_private(path, json.dumps(made, indent=2).encode() + b"\n", first=not tokens):
        return load_or_make_tokens(data_dir)  # another server made them first: use those
    log.warning("made access tokens for this server in %s (mode 0600)", path)
    return made


def _keep_private(path: Path) -> None:
    """A token file others can read is made private again, and said."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, 0o600)
        log.warning("the token file %s was readable by others (mode %o): now 0600", path, mode)


def _write_private(path: Path, data: bytes, *, first: bool) -> bool:
    """Write `data` to `path` with mode 0600 from the first byte, atomically and durably.
    With `first`, only if `path` does not exist yet (two servers starting on one data
    directory agree on the first one's tokens): False when it did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(descriptor, 0o600)  # a leftover temporary file keeps its own mode
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if first:
            try:
                os.link(temporary, path)  # fails if it exists: never over another's tokens
            except FileExistsError:
                return False
            finally:
                temporary.unlink(missing_ok=True)
        else:
            os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return True
