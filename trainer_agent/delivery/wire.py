"""JSON for the wire and the spool.

orjson encodes a batch of step columns about twenty times faster than `json` (tens of µs
against a few hundred, on the sender thread that shares the CPU with training). It writes
NaN and ±Inf as null, which is what the server stores for them. Like `json`, it turns
non-string keys into strings. NumPy scalars and arrays (common in a user's config) become
numbers and lists; any other value it cannot encode becomes its `str` instead of failing.
"""

from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=str, option=_OPTIONS)


def dumps_text(value: Any) -> str:
    return dumps(value).decode()


loads = orjson.loads


# A run's config and environment are read by every comparison: the server takes each up to
# 64 KiB as JSON (STOKER_MAX_CONFIG_BYTES, STOKER_MAX_ENVIRONMENT_BYTES) and refuses more.
MAX_SECTION_BYTES = 64 * 1024
DROPPED_NOTE = "_stoker_dropped"


def within_bytes(section: dict[str, Any], max_bytes: int = MAX_SECTION_BYTES) -> dict[str, Any]:
    """`section` as it fits in `max_bytes` of JSON: the largest top-level entries are left
    out until the rest fits, and named under `_stoker_dropped`, so a run with a huge value in
    its config (a vocabulary, a dataset listing) is still stored, with everything else."""
    try:
        if len(dumps(section)) <= max_bytes:
            return section
        sizes = sorted(((len(dumps(v)), str(k)) for k, v in section.items()), reverse=True)
    except (TypeError, ValueError):  # not encodable here (an int over 64 bits): sent as it is
        return section
    kept = {str(key): value for key, value in section.items()}
    dropped: list[str] = []
    for _size, key in sizes:
        del kept[key]
        dropped.append(key)
        note = {DROPPED_NOTE: f"left out, over {max_bytes} bytes: {', '.join(dropped)}"[:1000]}
        if len(dumps({**kept, **note})) <= max_bytes:
            return {**kept, **note}
    return {DROPPED_NOTE: f"left out, over {max_bytes} bytes: every entry"}
