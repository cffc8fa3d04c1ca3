"""Durations, sizes and switches as Stoker's settings write them, on both sides.

The agent's settings (trainer_agent/settings.py) and the server's (stoker_server/core/
settings.py) read every value through these, so "90s", "500ms", "2h", "50GB", "512MiB" and
"off" mean the same everywhere, and a value that is none of them is refused with the same
sentence: the server refuses to start, the agent says it once and keeps the default.
"""

import re

# A duration's unit → seconds; no unit: seconds.
DURATION_UNITS: dict[str, float] = {
    "ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400,
}  # fmt: skip
# A size's unit → bytes (kB, MB ... are powers of 1000, KiB, MiB ... of 1024); no unit: bytes.
SIZE_UNITS: dict[str, int] = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
SWITCH_ON = ("1", "true", "yes", "on")
SWITCH_OFF = ("0", "false", "no", "off")
_NUMBER_WITH_UNIT = re.compile(
    r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?\s*([a-zA-Z]*)\s*"
)


def _with_unit(text: str, units: dict[str, float] | dict[str, int], what: str) -> float:
    match = _NUMBER_WITH_UNIT.fullmatch(text)
    if match is None or (match[3] and match[3].lower() not in units):
        names = ", ".join(units)
        raise ValueError(f"{text!r} is not a {what}: write a number, or one with a unit ({names})")
    number = float(match[1]) * 10 ** int(match[2] or 0)
    return number * units.get(match[3].lower(), 1)


def parse_duration_s(text: str) -> float:
    """A duration in seconds: "90", "1.5", "500ms", "90s", "2m", "12h", "90d", "1w", "1y"."""
    return _with_unit(text, DURATION_UNITS, "duration")


def duration_text(seconds: float) -> str:
    """A duration as a user would write it: 31536000 -> "1y", 600 -> "10m", 0.5 -> "0.5s"."""
    for unit in ("y", "w", "d", "h", "m", "s"):
        size = DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def parse_size_bytes(text: str) -> int:
    """A size in bytes: "1048576", "500kB", "50GB", "512MiB"."""
    size = _with_unit(text, SIZE_UNITS, "size")
    if size != int(size):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(size)


def parse_switch(text: str) -> bool:
    """On or off: 1/0, true/false, yes/no, on/off (any case)."""
    value = text.strip().lower()
    if value in SWITCH_ON:
        return True
    if value in SWITCH_OFF:
        return False
    raise ValueError(f"{text!r} is not a switch: write one of {', '.join(SWITCH_ON + SWITCH_OFF)}")
