"""Throttle (clock-event) reasons as named flags: the bitmask NVML gives, read
through the real binding from the fake library, named by the agent's table; a slow worker
whose GPU is throttled is named for it in the straggler line, not for its input."""

import os

from stoker_server.diagnosis.stragglers import WorkerTiming, find_straggler
from stoker_server.diagnosis.verdict import diagnose
from stoker_server.diagnosis.window import RunWindow
from tests.harness.fake_nvml import FakeNvml
from trainer_agent.telemetry.nvml import Nvml
from trainer_agent.telemetry.throttle import SLOWING_MASK, throttle_flags, throttle_words


def test_flags_are_named_and_unknown_bits_kept() -> None:
    assert throttle_flags(0) == []
    assert throttle_flags(None) == []
    assert throttle_flags(0x1) == ["gpu_idle"]
    assert throttle_flags(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert throttle_flags(0x10 | 0x800) == ["sync_boost", "bit_11"]
    assert throttle_words(0x1 | 0x20) == ["thermal slowdown (software)"]  # idle does not slow
    assert throttle_words(0x1, slowing_only=False) == ["idle"]
    assert SLOWING_MASK == 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def test_the_bitmask_from_nvml_names_its_flags(fake_nvml: FakeNvml) -> None:
    fake_nvml.preload()
    fake_nvml.write(gpu0={"throttle": 0x4 | 0x20 | 0x80})
    nvml = Nvml()
    try:
        mask = nvml.reading(0, os.getpid())["throttle"]
    finally:
        nvml.shutdown()
    assert throttle_flags(mask) == ["sw_power_cap", "sw_thermal", "hw_power_brake"]
    assert throttle_words(mask) == ["power cap", "thermal slowdown (software)", "power brake"]


def test_a_throttled_slow_worker_is_named_for_its_clocks_not_its_input() -> None:
    workers = [
        WorkerTiming(0, "host-0", 0.050, 0.02),
        WorkerTiming(1, "host-1", 0.050, 0.02),
        WorkerTiming(2, "host-2", 0.050, 0.02),
        WorkerTiming(3, "host-3", 0.080, 0.02, throttle=0x40),
    ]
    straggler = find_straggler(workers)
    assert straggler is not None and (straggler.rank, straggler.kind) == (3, "throttled")
    assert straggler.text.startswith(
        "worker 3 (host-3) is slow because of thermal slowdown (hardware), not its input"
    )
    unthrottled = find_straggler([*workers[:3], WorkerTiming(3, "host-3", 0.080, 0.02)])
    assert unthrottled is not None and unthrottled.kind == "compute"


def test_the_diagnosis_names_the_throttled_worker_from_its_device_rows() -> None:
    window = RunWindow(run_id=1, window_s=30.0, hosts={0: "host-a", 1: "host-b"})
    for rank, dur in ((0, 0.05), (1, 0.10)):
        window.add_steps(
            now=1.0, step=list(range(1, 21)), t=[i * dur for i in range(20)], dur=[dur] * 20,
            wait=[0.001] * 20, batch_size=[32] * 20, rank=rank,
        )  # fmt: skip
        window.add_device(
            now=1.0, t=[0.5, 1.0], gpu=[0, 0], util=[95.0, 95.0], mem_used=[1.0, 1.0],
            mem_total=[2.0, 2.0], temp_c=[80.0, 80.0],
            throttle=[0x20 if rank == 1 else 0x1] * 2, rank=rank,
        )  # fmt: skip
    diagnosis = diagnose(
        window, now=1.0, connected=True, min_steps=10, stall_min_s=60, stall_step_factor=20
    )
    evidence = {e.key: e for e in diagnosis.evidence}
    assert evidence["straggler"].text.startswith(
        "worker 1 (host-b) is slow because of thermal slowdown (software), not its input"
    )
    assert any("cooling and power limit" in a for a in diagnosis.advice)
