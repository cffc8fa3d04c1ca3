"""PostgreSQL's binary COPY format (and binary arrays) built from whole columns with numpy,
not row by row.

A COPY row is a 16-bit field count, then per field a 32-bit length (-1 for NULL) and the
value in network byte order. For fixed-width types every row has the same layout, so a
section's columns fill one numpy record array; a NULL's value bytes are then cut out with one
boolean mask. psycopg's `write_row` formats each value in Python: on the ingest path that was
most of the server's CPU per step row.
"""

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"  # no OIDs
TRAILER = b"\xff\xff"

# PostgreSQL type name -> the numpy type of its binary form.
FIXED_TYPES: dict[str, str] = {"int4": ">i4", "int8": ">i8", "float8": ">f8", "bool": "?"}


def encodable(types: Sequence[str]) -> bool:
    """Whether every column type has a fixed width (text columns go row by row)."""
    return all(t in FIXED_TYPES for t in types)


def _column(values: Any, pg_type: str, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """`values` (a list, possibly with None, a numpy array, or a scalar for every row) as a
    numpy array of its binary type, and the mask of its NULLs (None when there is none)."""
    if isinstance(values, np.ndarray):
        nulls = np.isnan(values) if values.dtype.kind == "f" else None
        if nulls is None or not nulls.any():
            return values.astype(FIXED_TYPES[pg_type], copy=False), None
        return np.where(nulls, 0, values).astype(FIXED_TYPES[pg_type]), nulls
    if not isinstance(values, list):
        return np.full(n, values, dtype=FIXED_TYPES[pg_type]), None
    if pg_type == "float8":
        # None becomes NaN; the protocol turned non-finite floats into None, so NaN is NULL.
        array = np.asarray(values, dtype=np.float64)
        nulls = np.isnan(array)
        return array, nulls if nulls.any() else None
    if None in values:
        nulls = np.fromiter((v is None for v in values), dtype=bool, count=n)
        filled = [0 if v is None else v for v in values]
        return np.asarray(filled, dtype=FIXED_TYPES[pg_type]), nulls
    return np.asarray(values, dtype=FIXED_TYPES[pg_type]), None


def encode_rows(columns: Sequence[Any], types: Sequence[str]) -> bytes:
    """The rows of `columns` (lists or numpy arrays of one length, or scalars repeated on
    every row) in COPY's binary format, without the signature and trailer. A float array's
    NaN is NULL."""
    n = next((len(c) for c in columns if isinstance(c, list | np.ndarray)), 0)
    if n == 0:
        return b""
    layout: list[tuple[str, str]] = [("count", ">i2")]
    for i, pg_type in enumerate(types):
        layout += [(f"len{i}", ">i4"), (f"val{i}", FIXED_TYPES[pg_type])]
    rows = np.empty(n, dtype=np.dtype(layout))
    rows["count"] = len(types)
    keep: np.ndarray | None = None  # per byte of the row: kept (False: a NULL's value bytes)
    offset = 2
    for i, (values, pg_type) in enumerate(zip(columns, types, strict=True)):
        array, nulls = _column(values, pg_type, n)
        width = array.dtype.itemsize
        rows[f"val{i}"] = array
        rows[f"len{i}"] = width
        if nulls is not None:
            rows[f"len{i}"][nulls] = -1
            if keep is None:
                keep = np.ones((n, rows.dtype.itemsize), dtype=bool)
            keep[nulls, offset + 4 : offset + 4 + width] = False
        offset += 4 + width
    data = rows.view(np.uint8).reshape(n, rows.dtype.itemsize)
    return (data if keep is None else data[keep]).tobytes()


class BinaryArray:
    """A one-dimensional PostgreSQL array already in its binary form: a statement parameter
    sent as is, not adapted value by value by psycopg. Register array_dumpers() on the cursor."""

    __slots__ = ("data",)
    pg_type = ""

    def __init__(self, data: bytes) -> None:
        self.data = data


def binary_array(values: np.ndarray, pg_type: str) -> BinaryArray:
    """`values` (no NULLs) as PostgreSQL's binary array of `pg_type` (int4, int8, float8): a
    header (1 dimension, no NULLs, the element type, the length, lower bound 1), then per
    element its length and value in network byte order."""
    array_type, element_oid, _ = _ARRAYS[pg_type]
    header = np.array([1, 0, element_oid, len(values), 1], dtype=">i4").tobytes()
    dtype = np.dtype(FIXED_TYPES[pg_type])
    items = np.empty(len(values), dtype=np.dtype([("len", ">i4"), ("val", dtype)]))
    items["len"] = dtype.itemsize
    items["val"] = values
    return array_type(header + items.tobytes())


class _Int4Array(BinaryArray):
    pg_type = "int4"


class _Int8Array(BinaryArray):
    pg_type = "int8"


class _Float8Array(BinaryArray):
    pg_type = "float8"


# pg_type -> (its BinaryArray class, the element's oid, the array's oid)
_ARRAYS: dict[str, tuple[type[BinaryArray], int, int]] = {
    "int4": (_Int4Array, 23, 1007),
    "int8": (_Int8Array, 20, 1016),
    "float8": (_Float8Array, 701, 1022),
}


@cache
def array_dumpers() -> list[tuple[type[BinaryArray], type]]:
    """For `cursor.adapters.register_dumper(cls, dumper)`: each BinaryArray sent as is, in
    binary, typed as its array. psycopg is imported here: SQLite installs lack it."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    def dump(self: Dumper, obj: BinaryArray) -> bytes:
        return obj.data

    return [
        (
            cls,
            type(
                f"ArrayDumper{oid}", (Dumper,), {"format": Format.BINARY, "oid": oid, "dump": dump}
            ),
        )
        for cls, _, oid in _ARRAYS.values()
    ]
