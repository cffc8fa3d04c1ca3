"""GPM and energy through the real nvidia-ml-py binding and the fake libnvidia-ml.

The fake implements GPM with nvml.h's structs (version fields, per-metric nvmlReturn, the
100 ms counter refresh) and the energy counter as power integrated over time, so these tests
check what the agent does with what a GPU answers, never a monkeypatched pynvml.
"""

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness.fake_nvml import FakeNvml
from tests.harness.support import ServerProcess
from trainer_agent import log_once
from trainer_agent.telemetry.energy import EnergyMeter
from trainer_agent.telemetry.gpm import GPM_FIELDS, GpmReader
from trainer_agent.telemetry.nvml import Nvml

HOPPER = {"cc_major": 9, "cc_minor": 0, "gpm": 1}
SCRIPTED = {"gpm2": 42.5, "gpm3": 21.0, "gpm5": 12.0, "gpm10": 63.0, "gpm12": 7.5, "gpm13": 3.0}
EXPECTED = {
    "sm_util": 42.5, "sm_occupancy": 21.0, "tensor_util": 12.0, "dram_bw_util": 63.0,
    "fp32_util": 7.5, "fp16_util": 3.0,
}  # fmt: skip


@pytest.fixture
def nvml(fake_nvml: FakeNvml) -> Iterator[Nvml]:
    fake_nvml.preload()
    log_once.forget()  # each test sees its own first warnings (they are said once a process)
    instance = Nvml()
    yield instance
    instance.shutdown()
    log_once.forget()


def _reader(nvml: Nvml, index: int = 0) -> GpmReader:
    reader = GpmReader(nvml, index)
    reader.start()
    return reader


def test_gpm_fields_on_a_gpm_capable_gpu_and_null_on_one_without(
    fake_nvml: FakeNvml, nvml: Nvml
) -> None:
    fake_nvml.write(device_count=2, gpu0={**HOPPER, **SCRIPTED}, gpu1={"cc_major": 8})
    hopper, ampere = _reader(nvml, 0), _reader(nvml, 1)
    try:
        assert hopper.active and not ampere.active
        assert ampere.reason == "compute capability 8.0 (GPM needs Hopper, 9.0, or newer)"
        time.sleep(0.25)
        values = hopper.read()
        assert values == pytest.approx(EXPECTED, abs=0.01)
        assert hopper.window_s is not None and hopper.window_s >= 0.1
        assert ampere.read() == dict.fromkeys(GPM_FIELDS)  # null, never 0
    finally:
        hopper.close()
        ampere.close()


def test_a_hopper_whose_driver_says_no_gpm_gets_null(fake_nvml: FakeNvml, nvml: Nvml) -> None:
    fake_nvml.write(gpu0={**SCRIPTED, "cc_major": 9, "gpm": 0})
    reader = _reader(nvml)
    assert not reader.active and reader.reason == "the driver says this GPU has no GPM"
    assert set(reader.read().values()) == {None}


def test_each_metric_trusted_only_on_its_own_success(fake_nvml: FakeNvml, nvml: Nvml) -> None:
    # FP16 answers NOT_SUPPORTED in its own nvmlReturn, FP32 is never filled by this GPU.
    scripted = {key: value for key, value in SCRIPTED.items() if key != "gpm12"}
    fake_nvml.write(gpu0={**HOPPER, **scripted, "gpm_ret13": 3})
    reader = _reader(nvml)
    try:
        time.sleep(0.2)
        values = reader.read()
    finally:
        reader.close()
    assert values["fp16_util"] is None and values["fp32_util"] is None
    assert values["sm_util"] == pytest.approx(42.5, abs=0.01)
    assert values["tensor_util"] == pytest.approx(12.0, abs=0.01)


def test_samples_less_than_100_ms_apart_are_never_read_as_zero(
    fake_nvml: FakeNvml, nvml: Nvml
) -> None:
    fake_nvml.write(gpu0={**HOPPER, **SCRIPTED})
    reader = _reader(nvml)
    try:
        time.sleep(0.15)
        assert reader.read()["sm_util"] == pytest.approx(42.5, abs=0.01)
        too_soon = reader.read()  # the GPU has not refreshed its counters: it would read 0
        assert set(too_soon.values()) == {None}
        time.sleep(0.12)
        later = reader.read()  # the window since the last good sample
        assert later["sm_util"] == pytest.approx(42.5, abs=0.01)
        assert reader.window_s is not None and reader.window_s >= 0.12
    finally:
        reader.close()


def test_a_window_averages_what_the_sms_did_over_it(fake_nvml: FakeNvml, nvml: Nvml) -> None:
    fake_nvml.write(gpu0={**HOPPER, "gpm2": 20.0})
    reader = _reader(nvml)
    try:
        time.sleep(0.3)
        fake_nvml.write(gpu0={**HOPPER, "gpm2": 80.0})
        time.sleep(0.3)
        assert reader.read()["sm_util"] == pytest.approx(50.0, abs=6.0)
    finally:
        reader.close()


def test_the_switch_turns_gpm_off(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvml.write(gpu0={**HOPPER, **SCRIPTED})
    monkeypatch.setenv("STOKER_GPM", "0")
    reader = _reader(nvml)
    assert not reader.active and reader.reason == "turned off by STOKER_GPM"
    assert set(reader.read().values()) == {None}


def test_no_permission_is_said_once_and_gpm_stays_null(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture
) -> None:
    # A MIG instance, or a container without profiling rights, answers NoPermission (4).
    fake_nvml.write(gpu0={**HOPPER, **SCRIPTED}, errors={"nvmlGpmSampleGet": 4})
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    reader = _reader(nvml)
    for _ in range(3):
        time.sleep(0.11)
        assert set(reader.read().values()) == {None}
    said = [r.getMessage() for r in caplog.records if "no permission" in r.getMessage()]
    assert len(said) == 1 and "MIG" in said[0]


def test_energy_from_the_counter_and_integrated_where_it_is_missing(
    fake_nvml: FakeNvml, nvml: Nvml
) -> None:
    fake_nvml.write(device_count=2, gpu0={"power_mw": 200_000},
                    gpu1={"power_mw": 100_000, "energy": 0})  # fmt: skip
    counter, integrated = EnergyMeter(nvml, 0), EnergyMeter(nvml, 1)
    first = counter.read(200.0), integrated.read(100.0)
    assert first[0] == {"energy_j": 0.0, "energy_integrated": False}
    assert first[1] == {"energy_j": 0.0, "energy_integrated": True}
    started = time.monotonic()
    for _ in range(5):
        time.sleep(0.1)
        last = counter.read(200.0), integrated.read(100.0)
    elapsed = time.monotonic() - started
    assert last[0]["energy_j"] == pytest.approx(200.0 * elapsed, rel=0.05)
    assert last[1]["energy_j"] == pytest.approx(100.0 * elapsed, rel=0.05)
    assert last[1]["energy_integrated"] is True


# --- through the agent and a real server ---------------------------------------------------


@pytest.fixture
def energy_server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        data_dir=tmp_path / "server", env={"STOKER_ENERGY_PRICE_KWH": "0.30"}
    ).start()
    yield process
    process.stop()


def _loop(monitor: object, seconds: float, wait_s: float, compute_s: float) -> None:
    def batches() -> Iterator[int]:
        i = 0
        while True:
            time.sleep(wait_s)  # the input pipeline
            yield i
            i += 1

    end = time.monotonic() + seconds
    for _ in monitor.iterate(batches()):  # type: ignore[attr-defined]
        time.sleep(compute_s)  # the step computing
        if time.monotonic() >= end:
            break


def test_a_run_stores_gpm_and_energy_split_by_phase_within_5_percent(
    fake_nvml: FakeNvml, energy_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer_agent import Monitor, flush

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = {"gpu0": {**HOPPER, **SCRIPTED, "power_mw": 100_000}, "gpu1": {"power_mw": 100_000}}
    fake_nvml.write(device_count=2, **gpus)
    fake_nvml.preload()
    with Monitor(run_name="energy", server=energy_server.url, sample_interval_s=0.1) as mon:
        _loop(mon, 3.0, wait_s=0.03, compute_s=0.02)  # starved: 60 % waiting, at 100 W
        # No step while the power changes: a reading's window that spans the change holds no
        # step time, so what it draws at either power counts as neither starved nor computing.
        time.sleep(0.3)
        switched = time.time()
        fake_nvml.write(device_count=2, gpu0={**gpus["gpu0"], "power_mw": 300_000},
                        gpu1={**gpus["gpu1"], "power_mw": 300_000})  # fmt: skip
        time.sleep(0.3)
        _loop(mon, 3.0, wait_s=0.0, compute_s=0.02)  # fed, at 300 W
    flush()
    run = next(r for r in energy_server.get("/api/v1/runs")["data"] if r["name"] == "energy")
    summary = run["summary"]
    assert summary["sm_util_mean"] == pytest.approx(42.5, abs=0.5)
    assert summary["tensor_util_mean"] == pytest.approx(12.0, abs=0.5)

    samples = energy_server.get(
        f"/api/v1/runs/{run['id']}/samples",
        fields="sm_util,tensor_util,dram_bw_util,energy_j",
        max_points=100_000,
    )["series"]
    by_gpu = {s["gpu"]: s for s in samples}
    assert {v for v in by_gpu[1]["sm_util"]} == {None}  # no GPM: null, never 0
    assert set(by_gpu[0]["sm_util"][1:]) != {None}

    # Energy per run: scripted power x time over the span of each GPU's readings.
    truth_total = 0.0
    for gpu in (0, 1):
        t = [
            x
            for x, e in zip(by_gpu[gpu]["t"], by_gpu[gpu]["energy_j"], strict=True)
            if e is not None
        ]
        truth_total += 100.0 * (switched - t[0]) + 300.0 * (t[-1] - switched)
    assert summary["energy_j"] == pytest.approx(truth_total, rel=0.05)
    assert summary["energy_integrated"] is False

    # Per phase: the energy burned while steps waited is the scripted power x each step's
    # measured wait (the fed phase's few hundred µs per step count too, at 300 W), and the
    # energy while computing the power x the rest of each step.
    energy = energy_server.get(f"/api/v1/runs/{run['id']}/energy")
    steps = energy_server.get(f"/api/v1/runs/{run['id']}/steps", max_points=100_000)
    rows = zip(steps["t"], steps["dur"], steps["wait"], strict=True)
    starved = computing = 0.0
    for t, dur, wait in rows:
        if wait is None:
            continue
        watts = 100.0 if t < switched else 300.0
        starved += watts * wait
        computing += watts * (dur - wait)
    assert energy["total_j"] == pytest.approx(summary["energy_j"], rel=1e-6)
    assert energy["starved_j"] == pytest.approx(2 * starved, rel=0.05)  # two GPUs
    assert energy["computing_j"] == pytest.approx(2 * computing, rel=0.05)
    assert energy["starved_cost"] == pytest.approx(energy["starved_j"] / 3.6e6 * 0.30)


def test_metrics_carry_gpm_gauges_only_for_gpm_gpus(
    fake_nvml: FakeNvml, energy_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer_agent import Monitor

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(device_count=2, gpu0={**HOPPER, **SCRIPTED}, gpu1={"util": 50})
    fake_nvml.preload()
    with Monitor(run_name="gauges", server=energy_server.url, sample_interval_s=0.1) as mon:

        def scraped() -> str | None:
            text = httpx.get(f"{energy_server.url}/metrics").text
            return text if "stoker_gpu_sm_active_percent{" in text else None

        for _ in mon.iterate(range(10_000)):
            time.sleep(0.01)
            text = scraped()
            if text is not None:
                break
    assert text is not None
    sm_lines = [
        line for line in text.splitlines() if line.startswith("stoker_gpu_sm_active_percent{")
    ]
    assert len(sm_lines) == 1 and 'gpu="0"' in sm_lines[0]
    assert float(sm_lines[0].rsplit(" ", 1)[1]) == pytest.approx(42.5, abs=0.5)
    assert any(
        line.startswith("stoker_gpu_utilization_percent{") and 'gpu="1"' in line
        for line in text.splitlines()
    )


def test_gpm_windows_line_up_with_steps_longer_than_the_interval(
    fake_nvml: FakeNvml, energy_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps of 0.4 s (half waiting for input with the SMs idle, half computing at 80 %)
    sampled every 0.1 s: a window per reading would read 0 or 80; windows closed at the
    steps' ends read each step's mean, and the readings in between still carry utilization
    with the GPM fields left open (null, not 0)."""
    from trainer_agent import Monitor, flush

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    wait_s = compute_s = 0.2
    fake_nvml.write(gpu0={**HOPPER, "gpm2": 0.0})
    fake_nvml.preload()

    def batches() -> Iterator[int]:
        i = 0
        while True:
            fake_nvml.write(gpu0={**HOPPER, "gpm2": 0.0})  # waiting: the SMs idle
            time.sleep(wait_s)
            yield i
            i += 1

    with Monitor(run_name="aligned", server=energy_server.url, sample_interval_s=0.1) as mon:
        for i in mon.iterate(batches()):
            fake_nvml.write(gpu0={**HOPPER, "gpm2": 80.0})  # computing
            time.sleep(compute_s)
            if i >= 11:
                break
    flush()
    run = next(r for r in energy_server.get("/api/v1/runs")["data"] if r["name"] == "aligned")
    (series,) = energy_server.get(
        f"/api/v1/runs/{run['id']}/samples", fields="util,sm_util", max_points=100_000
    )["series"]
    steps = energy_server.get(f"/api/v1/runs/{run['id']}/steps", max_points=100_000)
    ends = [t + dur for t, dur in zip(steps["t"], steps["dur"], strict=True)]
    compute_share = [(d - w) / d for d, w in zip(steps["dur"], steps["wait"], strict=True)]
    rows = list(zip(series["t"], series["util"], series["sm_util"], strict=True))
    windows = [(t, sm) for t, _, sm in rows if sm is not None]
    # Readings between steps' ends leave the window open: utilization, and GPM null.
    assert any(util is not None and sm is None for _, util, sm in rows)
    # Each window from one step's end to a later one's (the first, from the run's start,
    # and the last, closed by the run's end, aside) holds whole steps: its SM utilization is
    # 80 % times the share of those steps spent computing, never a phase's 0 or 80.
    inner = [(a[0], b[0], b[1]) for a, b in itertools.pairwise(windows) if a[0] >= ends[0]]
    inner = [w for w in inner if w[1] <= ends[-2] + wait_s]
    assert len(inner) >= len(steps["t"]) // 2
    for start, end, sm_util in inner:
        spanned = [i for i, e in enumerate(ends) if start - wait_s / 2 < e <= end + wait_s / 2]
        assert spanned, (start, end)
        share = sum(compute_share[i] for i in spanned) / len(spanned)
        assert sm_util == pytest.approx(80.0 * share, abs=15.0), (start, end, spanned)
    # One window per step, not one per reading, once a step has ended: before the first one
    # does the sampler knows of no step and closes one at each reading (as many as fit in
    # the first step after the sampler's start: 4 in one loaded CI run).
    after_first = [w for w in windows if w[0] > ends[0]]
    assert len(after_first) <= len(steps["t"]) + 1
    assert len(rows) > len(windows)


def test_a_short_step_after_long_ones_closes_windows_at_every_reading_again(
    fake_nvml: FakeNvml, nvml: Nvml
) -> None:
    """A long first step (tracing, say) must not keep later windows open: once steps are
    shorter than the interval, every reading closes a window again."""
    from trainer_agent.capture.recorder import Recorder
    from trainer_agent.telemetry.samplers import DeviceSource, Sampler

    fake_nvml.write(gpu0={**HOPPER, **SCRIPTED})
    recorder = Recorder(max_rows=10_000)
    device = DeviceSource(nvml, tf_memory=lambda i: (None, None))
    sampler = Sampler(recorder, interval_s=0.1, device=device)  # ticked here, not started
    sm_util: list[float | None] = []

    def tick(**kwargs: bool) -> None:
        time.sleep(0.15)  # more than the GPU's 100 ms counter refresh
        sampler.tick(**kwargs)
        sm_util.extend((recorder.device.drain() or {}).get("sm_util", [None]))

    tick()  # the first reading opens the first window
    sampler.step_ended(1.0)  # a step longer than the interval ended
    tick(boundary=True)  # its end closes the window
    tick()  # a timed reading within the next long step: the window stays open
    sampler.step_ended(0.01)  # steps are short now
    tick()
    assert sm_util[0] is None and sm_util[2] is None
    assert sm_util[1] == pytest.approx(42.5, abs=0.01)
    assert sm_util[3] == pytest.approx(42.5, abs=0.01)
