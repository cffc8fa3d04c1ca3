"""A group of agent batches' rows on their way into the tables (the ingest hot path).

Rows go in through the driver's `executemany` on SQLite, and one binary COPY per table for a
whole group on PostgreSQL; a group's steps update the step rollups with one statement. No
per-row ORM work. Everything runs on the group's connection, inside its transaction.
"""

from collections.abc import Iterable, Sequence
from functools import cache
from itertools import repeat
from typing import Any, cast

import numpy as np
from sqlalchemy import BigInteger, Boolean, Float, Integer
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from stoker_server.core.db import placeholder
from stoker_server.core.step_chunks import COLUMNS, PG_TYPES, chunk_rows, insert_chunks_sql
from stoker_server.ingest.copy_binary import (
    SIGNATURE,
    TRAILER,
    array_dumpers,
    binary_array,
    encodable,
    encode_rows,
)
from stoker_server.ingest.device_rollups import DevicePart, device_part, update_device_rollups
from stoker_server.ingest.protocol import Columns

# Step rollup tiers (steps per bucket); see core.models.StepRollup and api.queries.step_series.
ROLLUP_WIDTHS = (16, 64, 256, 1024, 4096, 16384)

# PostgreSQL: sections waiting for their COPY (run id, rank, column values), by table and
# the columns they carry.
Copies = dict[tuple[str, tuple[str, ...]], list[tuple[int, int, list[Any]]]]

# A group's steps for its rollups: (run id, rank, step, t, dur, wait) of each batch.
RollupPart = tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class GroupRows:
    """The rows of one group of batches: `insert` and `roll_up` for each section, then
    `finish` once, before the group's commit."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._postgres = connection.dialect.name == "postgresql"
        self._copies: Copies = {}
        self._rollups: list[RollupPart] = []
        self._device_rollups: list[DevicePart] = []
        self._step_chunks: list[tuple[Any, ...]] = []

    def insert(
        self, table: str, columns: Columns, *, run_id: int, rank: int,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> None:  # fmt: skip
        """Insert a columnar section as rows: one driver-level executemany of plain tuples, or
        on PostgreSQL rows kept for the group's COPY of the table (see `_copy_all`).

        `arrays`: numpy copies of some of its columns (a float's NaN: null), which the COPY
        encodes instead of converting the lists again."""
        names = [name for name, value in columns.__dict__.items() if value is not None]
        if self._postgres:
            given = arrays or {}
            values = [given.get(name, getattr(columns, name)) for name in names]
            self._copies.setdefault((table, tuple(names)), []).append((run_id, rank, values))
            return
        values = [getattr(columns, name) for name in names]
        n = len(values[0])
        rows = zip(repeat(run_id, n), repeat(rank, n), *values, strict=True)
        mark = placeholder(self.connection)
        sql = (
            f"INSERT INTO {table} (run_id, rank, {', '.join(names)}) "
            f"VALUES ({', '.join([mark] * (len(names) + 2))})"
        )
        executemany(self.connection, sql, rows)

    def insert_steps(
        self, *, run_id: int, rank: int, step: np.ndarray, t: np.ndarray, dur: np.ndarray,
        wait: np.ndarray, batch_size: np.ndarray | None,
    ) -> None:  # fmt: skip
        """Keep a batch's steps, as stepchunk rows, for the group's one insert of them."""
        self._step_chunks += chunk_rows(run_id, rank, step, t, dur, wait, batch_size)

    def roll_up(
        self, *, run_id: int, rank: int, step: np.ndarray, t: np.ndarray, dur: np.ndarray,
        wait: np.ndarray,
    ) -> None:  # fmt: skip
        """Keep a batch's steps for the group's one rollup statement (unknown waits: NaN)."""
        self._rollups.append((run_id, rank, step, t, dur, wait))

    def roll_up_device(self, *, run_id: int, rank: int, columns: Columns) -> None:
        """Keep a batch's device samples for the group's device rollups."""
        t, gpu = columns.column("t"), columns.column("gpu")
        self._device_rollups.append(device_part(run_id, rank, gpu, t, columns))

    def finish(self) -> None:
        """Write what the group kept: its COPYs (PostgreSQL), then its rollups."""
        _copy_all(self.connection, self._copies)
        _insert_step_chunks(self.connection, self._step_chunks)
        _update_rollups(self.connection, self._rollups)
        update_device_rollups(self.connection, self._device_rollups)


def executemany(connection: Connection, sql: str, rows: Iterable[Sequence[Any]]) -> None:
    """Run `sql` once per row on the DBAPI cursor of the same connection (same transaction).

    SQLAlchemy's own executemany inspects every parameter set; on the ingest path that cost
    more than the insert.
    """
    cursor = connection.connection.cursor()
    try:
        # sqlite3 and psycopg take any iterable of rows (the callers' are lazy zips); the
        # DBAPI protocol's type asks for a sequence.
        cursor.executemany(sql, cast("Sequence[Sequence[Any]]", rows))
    finally:
        cursor.close()


def _copy_all(connection: Connection, copies: Copies) -> None:
    """One binary COPY per table (and set of columns) for a whole group of batches: no text
    to format or parse, no statement per row or per batch. Sections of fixed-width columns
    (steps, samples) are encoded whole by numpy (copy_binary); the others row by row."""
    for (table, names), parts in copies.items():
        types = _copy_types(table, names)
        cursor = connection.connection.cursor()
        try:
            with cursor.copy(
                f"COPY {table} (run_id, rank, {', '.join(names)}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                if encodable(types):
                    copy.write(SIGNATURE)
                    for run_id, rank, values in parts:
                        copy.write(encode_rows([run_id, rank, *values], types))
                    copy.write(TRAILER)
                    continue
                copy.set_types(types)
                for run_id, rank, values in parts:
                    n = len(values[0])
                    for row in zip(repeat(run_id, n), repeat(rank, n), *values, strict=True):
                        copy.write_row(row)
        finally:
            cursor.close()


def _insert_step_chunks(connection: Connection, chunks: Sequence[tuple[Any, ...]]) -> None:
    """A group's step chunks: one COPY (PostgreSQL) or one executemany (SQLite)."""
    if not chunks:
        return
    if connection.dialect.name != "postgresql":
        executemany(connection, insert_chunks_sql(connection), chunks)
        return
    cursor = connection.connection.cursor()
    try:
        with cursor.copy(
            f"COPY stepchunk ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(PG_TYPES)
            for chunk in chunks:
                copy.write_row(chunk)
    finally:
        cursor.close()


@cache
def _copy_types(table: str, names: tuple[str, ...]) -> list[str]:
    """PostgreSQL type names of `table`'s columns run_id, rank and `names` (binary COPY sends
    each value in its column's own binary form, so it must know them)."""
    columns = SQLModel.metadata.tables[table].columns
    return [_pg_type(columns[name].type) for name in ("run_id", "rank", *names)]


def _pg_type(column_type: Any) -> str:
    if isinstance(column_type, Boolean):
        return "bool"
    if isinstance(column_type, BigInteger):
        return "int8"
    if isinstance(column_type, Integer):
        return "int4"
    if isinstance(column_type, Float):
        return "float8"
    return "text"


def _rollup_columns(parts: Sequence[RollupPart]) -> list[np.ndarray]:
    """A group's steps aggregated into every rollup tier: the columns of `_ROLLUP_COLUMNS`,
    one row per (run, rank, width, bucket).

    The steps are sorted by (run, rank, step), so each bucket is one run of rows; each tier is
    reduced from the one below (every width is a multiple of the previous one). A group holds
    each key once, as one statement's upsert needs; steps sent twice (a restarted worker counts
    from 0 again) add to their bucket, as they did batch by batch.
    """
    run = np.concatenate([np.full(len(p[2]), p[0], dtype=np.int64) for p in parts])
    rank = np.concatenate([np.full(len(p[2]), p[1], dtype=np.int64) for p in parts])
    step, t, dur, wait = (np.concatenate([p[i] for p in parts]) for i in range(2, 6))
    order = np.lexsort((step, rank, run))
    run, rank, step, t, dur, wait = (a[order] for a in (run, rank, step, t, dur, wait))
    known = ~np.isnan(wait)
    # Per row of the tier below: n, step_max, t_max, dur_sum, dur_min, dur_max, wait_sum,
    # wait_n (for the raw steps, each step's own values).
    values = [
        np.ones(len(step), dtype=np.int64), step, t, dur, dur, dur,
        np.where(known, wait, 0.0), known.astype(np.int64),
    ]  # fmt: skip
    reducers = (np.add, np.maximum, np.maximum, np.add, np.minimum, np.maximum, np.add, np.add)
    bucket, below = step, 1
    out: list[list[np.ndarray]] = [[] for _ in range(12)]
    for width in ROLLUP_WIDTHS:
        bucket = bucket // (width // below)
        below = width
        change = (bucket[1:] != bucket[:-1]) | (rank[1:] != rank[:-1]) | (run[1:] != run[:-1])
        starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        run, rank, bucket = run[starts], rank[starts], bucket[starts]
        values = [r.reduceat(v, starts) for r, v in zip(reducers, values, strict=True)]
        for column, array in zip(
            out, [run, rank, np.full(len(starts), width), bucket, *values], strict=True
        ):
            column.append(array)
    return [np.concatenate(column) for column in out]


def _update_rollups(connection: Connection, parts: Sequence[RollupPart]) -> None:
    """Fold a group's steps into every rollup tier (insert or add to existing buckets) with
    one statement."""
    if not parts:
        return
    columns = _rollup_columns(parts)
    postgres = connection.dialect.name == "postgresql"
    lo, hi = ("LEAST", "GREATEST") if postgres else ("min", "max")
    upsert = (
        "ON CONFLICT (run_id, rank, width, bucket) DO UPDATE SET "
        "n = steprollup.n + excluded.n, "
        f"step_max = {hi}(steprollup.step_max, excluded.step_max), "
        f"t_max = {hi}(steprollup.t_max, excluded.t_max), "
        "dur_sum = steprollup.dur_sum + excluded.dur_sum, "
        f"dur_min = {lo}(steprollup.dur_min, excluded.dur_min), "
        f"dur_max = {hi}(steprollup.dur_max, excluded.dur_max), "
        "wait_sum = steprollup.wait_sum + excluded.wait_sum, "
        "wait_n = steprollup.wait_n + excluded.wait_n"
    )
    if postgres:
        cursor = connection.connection.cursor()
        try:
            for array_type, dumper in array_dumpers():
                cursor.adapters.register_dumper(array_type, dumper)
            new = _new_buckets(cursor, columns)
            if not new.all():
                # One statement over arrays, each built whole by numpy in PostgreSQL's binary
                # form: psycopg adapts a list value by value, and text (formatted here,
                # parsed there) cost the server more than the statement.
                cursor.execute(
                    f"INSERT INTO {_ROLLUP_COLUMNS} SELECT * FROM unnest({_ROLLUP_ARRAYS}) "
                    + upsert,
                    [binary_array(c[~new], t) for c, t in zip(columns, _ROLLUP_TYPES, strict=True)],
                )
            if new.any():
                with cursor.copy(f"COPY {_ROLLUP_COLUMNS} FROM STDIN (FORMAT BINARY)") as copy:
                    copy.write(SIGNATURE)
                    copy.write(encode_rows([c[new] for c in columns], _ROLLUP_TYPES))
                    copy.write(TRAILER)
        finally:
            cursor.close()
        return
    mark = placeholder(connection)
    executemany(
        connection,
        f"INSERT INTO {_ROLLUP_COLUMNS} VALUES ({', '.join([mark] * 12)}) {upsert}",
        zip(*(column.tolist() for column in columns), strict=True),
    )


def _new_buckets(cursor: Any, columns: Sequence[np.ndarray]) -> np.ndarray:
    """Which of a group's rollup rows start a bucket not stored yet: past the last stored
    bucket of their (run, rank, width), read through the key's index, one probe per key.

    Those go in by COPY, PostgreSQL's cheapest insert; the others (the bucket a batch
    continues, steps sent again) by the upsert (20,000 steps a group, rollups all upserted:
    1.2-1.4 us of PostgreSQL CPU per step; split: 0.9-1.1). Only this writer stores its
    agents' rows. Should another server store the same worker's at the same moment, the
    COPY fails on the key and the writer retries the batches one by one, reading again."""
    run, rank, width, bucket = columns[:4]
    keys, inverse = np.unique(np.stack([run, rank, width]), axis=1, return_inverse=True)
    cursor.execute(
        "SELECT (SELECT max(s.bucket) FROM steprollup s WHERE s.run_id = k.run_id "
        "AND s.rank = k.rank AND s.width = k.width) FROM unnest(%b, %b, %b) "
        "WITH ORDINALITY AS k(run_id, rank, width, i) ORDER BY k.i",
        [binary_array(keys[i], "int4") for i in range(3)],
    )
    last = np.array([-1 if m is None else m for (m,) in cursor.fetchall()], dtype=np.int64)
    return bucket > last[inverse.reshape(-1)]


_ROLLUP_COLUMNS = (
    "steprollup (run_id, rank, width, bucket, n, step_max, t_max, dur_sum, dur_min, dur_max, "
    "wait_sum, wait_n)"
)
_ROLLUP_TYPES = ["int4", "int4", "int4", "int8", "int4", "int8"] + ["float8"] * 5 + ["int4"]
_ROLLUP_ARRAYS = ", ".join(["%b"] * len(_ROLLUP_TYPES))
