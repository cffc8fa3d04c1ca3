"""Device and host sample series against a real server on SQLite and PostgreSQL: every
series found (ranks, GPU numbers with gaps), raw rows where they fit, and downsampled buckets
that hold exactly what the raw rows say (per bucket: the first sample's time, the mean, min
and max of each field), at the default zoom and zoomed into a time range. Device buckets of at
least a rollup width come from the device rollups written at ingest (aligned on multiples of
their width); they hold the same as the raw rows, and a replayed batch counts once."""

import math
import random
import uuid
from typing import Any

import httpx

from stoker_server.api.device_rollup_reads import rollup_width
from tests.harness.support import ServerProcess

T0 = 1.7e9
FIELDS = ("util", "mem_used", "throttle", "sm_util")


def _device(rng: random.Random, gpus: list[int], n: int) -> dict[str, list[Any]]:
    """`n` readings of each GPU at irregular times; GPU 0's GPM field is unsupported (null),
    the others miss it now and then; throttle is an integer bitmask."""
    columns: dict[str, list[Any]] = {"t": [], "gpu": [], **{f: [] for f in FIELDS}}
    for gpu in gpus:
        t = T0
        for i in range(n):
            t += rng.uniform(0.5, 1.5)
            columns["t"].append(t)
            columns["gpu"].append(gpu)
            columns["util"].append(0.0 if i == n // 3 else rng.uniform(60, 100))
            columns["mem_used"].append(float(rng.randrange(10**9, 8 * 10**10)))
            columns["throttle"].append(rng.choice([0, 0, 0, 4, 2**40]))
            columns["sm_util"].append(
                None if gpu == 0 or rng.random() < 0.1 else rng.uniform(0, 100)
            )
    return columns


def _upload(
    server: ServerProcess, run_key: str, rank: int, batch: dict[str, Any], seq: int = 1
) -> int:
    hello = {"type": "hello", "protocol": 1, "run_key": run_key, "rank": rank, "name": "s"}
    body = {"hello": hello, "batches": [{"type": "batch", "seq": seq, **batch}]}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return int(response.json()["run_id"])


def _rows(columns: dict[str, list[Any]], gpu: int) -> list[dict[str, Any]]:
    """One GPU's readings as rows, in the order sent (time order)."""
    keys = [k for k in columns if k != "gpu"]
    picked = [i for i, g in enumerate(columns["gpu"]) if g == gpu]
    return [{k: columns[k][i] for k in keys} for i in picked]


def _expected_buckets(
    rows: list[dict[str, Any]], fields: tuple[str, ...], max_points: int, *, aligned: bool = False
) -> dict[str, list[Any]]:
    """What a downsampled series must hold: equal-time buckets over the rows' own span (or,
    `aligned`, rollup-served: buckets of whole rollup widths at multiples of their width),
    each at its first sample's time with the mean, min and max of each field's values."""
    rows = sorted(rows, key=lambda r: r["t"])
    first, last = rows[0]["t"], rows[-1]["t"]
    width = (last - first) / (max_points - 1)
    origin = first
    if aligned:
        picked = rollup_width(first, last, max_points)
        assert picked is not None
        width, origin = picked[0] * picked[1], 0.0
    buckets: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        buckets.setdefault(math.floor((row["t"] - origin) / width), []).append(row)
    assert len(buckets) <= max_points
    out: dict[str, list[Any]] = {"t": [min(r["t"] for r in b) for b in buckets.values()]}
    for f in fields:
        values = [[r[f] for r in b if r[f] is not None] for b in buckets.values()]
        out[f] = [sum(v) / len(v) if v else None for v in values]
        out[f"{f}_min"] = [float(min(v)) if v else None for v in values]
        out[f"{f}_max"] = [float(max(v)) if v else None for v in values]
    return out


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _assert_buckets(series: dict[str, Any], expected: dict[str, list[Any]]) -> None:
    assert series["downsampled"] is True
    assert series["t"] == expected["t"]
    for key, values in expected.items():
        got = series[key]
        assert len(got) == len(values), key
        bad = [
            (i, g, e) for i, (g, e) in enumerate(zip(got, values, strict=True)) if not _close(g, e)
        ]
        assert not bad, (key, bad[:3])


def test_device_series_buckets_hold_what_the_raw_rows_say(db_server: ServerProcess) -> None:
    rng = random.Random(7)
    key = uuid.uuid4().hex
    # GPU numbers with gaps, and a second worker whose GPUs share the numbers of the first.
    rank0 = _device(rng, [0, 3, 7], 900)
    rank1 = _device(rng, [3], 700)
    # Rank 0 in two batches that share rollup buckets, each sent twice (replays).
    half = len(rank0["t"]) // 2
    for seq, part in ((1, slice(0, half)), (2, slice(half, None))):
        batch = {"device": {k: v[part] for k, v in rank0.items()}}
        run_id = _upload(db_server, key, 0, batch, seq=seq)
        assert _upload(db_server, key, 0, batch, seq=seq) == run_id
    assert _upload(db_server, key, 1, {"device": rank1}) == run_id
    path = f"/api/v1/runs/{run_id}/samples"
    fields = ",".join(FIELDS)

    raw = db_server.get(path, fields=fields)  # 900 rows a series: under the default 2,000
    assert [(s["rank"], s["gpu"], s["total"], s["downsampled"]) for s in raw["series"]] == [
        (0, 0, 900, False), (0, 3, 900, False), (0, 7, 900, False), (1, 3, 700, False),
    ]  # fmt: skip
    for series, (columns, gpu) in zip(
        raw["series"], [(rank0, 0), (rank0, 3), (rank0, 7), (rank1, 3)], strict=True
    ):
        rows = _rows(columns, gpu)
        assert series["t"] == [r["t"] for r in rows]
        for f in FIELDS:
            assert series[f] == [r[f] for r in rows], f
    assert raw["series"][0]["throttle"].count(2**40) > 0  # integers come back whole

    small = db_server.get(path, fields=fields, max_points=50)
    assert [(s["rank"], s["gpu"], s["total"]) for s in small["series"]] == [
        (0, 0, 900), (0, 3, 900), (0, 7, 900), (1, 3, 700),
    ]  # fmt: skip
    for series, (columns, gpu) in zip(
        small["series"], [(rank0, 0), (rank0, 3), (rank0, 7), (rank1, 3)], strict=True
    ):
        assert len(series["t"]) <= 50
        # 900 s over 50 points: buckets of at least 10 s, served by the rollups.
        _assert_buckets(series, _expected_buckets(_rows(columns, gpu), FIELDS, 50, aligned=True))
    assert all(v is None for v in small["series"][0]["sm_util_max"])  # unsupported: no value
    assert min(small["series"][0]["util_min"]) == 0.0  # the dip stays visible
    assert max(small["series"][0]["throttle_max"]) == 2**40

    # Buckets under the smallest rollup width: computed from the raw rows.
    fine = db_server.get(path, fields=fields, max_points=300)
    for series, (columns, gpu) in zip(
        fine["series"], [(rank0, 0), (rank0, 3), (rank0, 7), (rank1, 3)], strict=True
    ):
        assert rollup_width(series["t"][0], _rows(columns, gpu)[-1]["t"], 300) is None
        _assert_buckets(series, _expected_buckets(_rows(columns, gpu), FIELDS, 300))

    # Zoomed into a time range (both ends exclusive): the rows inside it, downsampled when
    # they do not fit, raw when they do.
    since, until = rank0["t"][200], rank0["t"][600]  # GPU 0's 201st and 601st readings
    inside = [r for r in _rows(rank0, 0) if since < r["t"] < until]
    zoomed = db_server.get(path, fields=fields, gpu=0, since_t=since, until_t=until, max_points=40)
    (series,) = zoomed["series"]
    assert (series["rank"], series["gpu"], series["total"]) == (0, 0, len(inside))
    # Whole buckets from the rollups, the two partial ones at the edges from the raw rows.
    _assert_buckets(series, _expected_buckets(inside, FIELDS, 40, aligned=True))
    zoomed = db_server.get(path, fields=fields, gpu=0, since_t=since, until_t=until, max_points=80)
    _assert_buckets(zoomed["series"][0], _expected_buckets(inside, FIELDS, 80))
    detail = db_server.get(path, fields="util", since_t=since, until_t=until, max_points=1000)
    assert [(s["rank"], s["gpu"]) for s in detail["series"]] == [(0, 0), (0, 3), (0, 7), (1, 3)]
    assert not any(s["downsampled"] for s in detail["series"])
    assert detail["series"][0]["util"] == [r["util"] for r in inside]
    # A range no sample falls in: no series.
    assert db_server.get(path, since_t=T0 - 100, until_t=T0 - 1)["series"] == []


def test_host_series_buckets_hold_what_the_raw_rows_say(db_server: ServerProcess) -> None:
    rng = random.Random(11)
    key = uuid.uuid4().hex
    hosts = []
    for _ in (0, 1):
        t = [T0 + i + rng.uniform(0, 0.5) for i in range(600)]
        hosts.append(
            {
                "t": t,
                "proc_cpu": [rng.uniform(0, 800) for _ in t],
                "rss": [2e9 + i for i in range(600)],
            }
        )
    run_id = _upload(db_server, key, 0, {"host": hosts[0]})
    assert _upload(db_server, key, 1, {"host": hosts[1]}) == run_id
    answer = db_server.get(f"/api/v1/runs/{run_id}/host", fields="proc_cpu,rss", max_points=30)
    assert [(s["rank"], s["total"]) for s in answer["series"]] == [(0, 600), (1, 600)]
    for series, host in zip(answer["series"], hosts, strict=True):
        rows = [
            dict(zip(("t", "proc_cpu", "rss"), r, strict=True))
            for r in zip(*host.values(), strict=True)
        ]
        _assert_buckets(series, _expected_buckets(rows, ("proc_cpu", "rss"), 30))
