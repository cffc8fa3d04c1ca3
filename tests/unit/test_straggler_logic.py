"""Stragglers and the job's run key, with scripted numbers: which worker holds the job back,
the straggler ratio, and the key and rank every worker of one job derives alike."""

import json

import pytest

from stoker_server.diagnosis.stragglers import (
    WorkerTiming,
    find_straggler,
    own_step_times,
    straggler_ratio,
)
from stoker_server.diagnosis.verdict import diagnose
from stoker_server.diagnosis.window import RunWindow
from trainer_agent.capture import job


def _timings(*workers: tuple[float, float | None]) -> list[WorkerTiming]:
    """(step seconds, input-wait share) per rank, rank r on host-r."""
    return [WorkerTiming(r, f"host-{r}", step, share) for r, (step, share) in enumerate(workers)]


def test_worker_waiting_far_more_on_input_is_named_with_its_host_and_share() -> None:
    # Synchronous 50 ms steps; worker 3 waits 41 %, the others at most 4 %.
    straggler = find_straggler(_timings((0.05, 0.02), (0.05, 0.04), (0.05, 0.01), (0.05, 0.41)))
    assert straggler is not None and (straggler.rank, straggler.kind) == (3, "input")
    assert straggler.text == (
        "worker 3 (host-3) waits 41.0 % on input while the others wait < 5 %: "
        "its pipeline starves the whole job"
    )


def test_no_straggler_when_every_worker_waits_alike_or_little() -> None:
    assert find_straggler(_timings((0.05, 0.30), (0.05, 0.35))) is None  # all starve alike
    assert find_straggler(_timings((0.05, 0.01), (0.05, 0.06))) is None  # nobody starves
    assert find_straggler(_timings((0.05, 0.5))) is None  # one worker is no job


def test_worker_whose_own_step_is_longest_is_named_when_input_does_not_explain_it() -> None:
    # No input wait anywhere; worker 1's step net of wait is 2x the median worker's.
    straggler = find_straggler(_timings((0.05, 0.0), (0.10, 0.0), (0.05, 0.0)))
    assert straggler is not None and (straggler.rank, straggler.kind) == (1, "compute")
    assert straggler.text.startswith("worker 1 (host-1) takes 100 ms per step net of input")


def test_straggler_ratio_is_the_slowest_own_step_over_the_median_workers() -> None:
    workers = _timings((0.05, 0.02), (0.05, 0.04), (0.05, 0.41))
    # Waits 1, 2 and 20.5 ms: the others waited 19.5 and 18.5 ms for worker 2 in the collective.
    assert own_step_times(workers) == pytest.approx({0: 0.0305, 1: 0.0315, 2: 0.05})
    assert straggler_ratio(workers) == pytest.approx(0.05 / 0.0315)
    assert straggler_ratio(_timings((0.05, 0.02), (0.05, 0.02))) == pytest.approx(1.0)
    assert straggler_ratio(_timings((0.05, 0.02))) is None


def test_diagnosis_of_a_job_window_names_the_starved_worker_in_its_evidence() -> None:
    window = RunWindow(run_id=1, window_s=30.0, hosts={0: "host-a", 1: "host-b"})
    for rank, wait in ((0, 0.001), (1, 0.03)):
        window.add_steps(
            now=1.0, step=list(range(1, 21)), t=[i * 0.05 for i in range(20)], dur=[0.05] * 20,
            wait=[wait] * 20, batch_size=[32] * 20, rank=rank,
        )  # fmt: skip
    diagnosis = diagnose(
        window, now=1.0, connected=True, min_steps=10, stall_min_s=60, stall_step_factor=20
    )
    evidence = {e.key: e for e in diagnosis.evidence}
    assert evidence["straggler"].value == 1
    assert evidence["straggler"].text.startswith("worker 1 (host-b) waits 60.0 % on input")
    assert diagnosis.steps_in_window == 40  # the job's window holds both workers' steps


def _cluster(monkeypatch: pytest.MonkeyPatch, cluster: dict, kind: str, index: int) -> None:
    monkeypatch.delenv("STOKER_RUN_KEY", raising=False)
    monkeypatch.delenv("STOKER_RANK", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    config = {"cluster": cluster, "task": {"type": kind, "index": index}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))


def test_every_worker_of_a_cluster_derives_one_key_and_each_fit_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
    keys, ranks = [], []
    for kind, index in (("chief", 0), ("worker", 0), ("worker", 1)):
        _cluster(monkeypatch, cluster, kind, index)
        keys.append(job.base_run_key("mw"))
        ranks.append(job.job_rank())
    assert len(set(keys)) == 1 and keys[0] is not None
    assert ranks == [0, 1, 2]  # the chief first, then the workers
    assert job.job_world_size() == 3
    _cluster(monkeypatch, {"worker": ["b:1", "d:1"]}, "worker", 0)
    assert job.base_run_key("mw") != keys[0]  # another cluster is another job
    assert job.base_run_key("other") != job.base_run_key("mw")
    first, second = job.job_run_key("fits"), job.job_run_key("fits")
    assert second == f"{first}.1"  # the second fit() of the job is a second run


def test_given_key_wins_and_no_cluster_means_no_job_key(monkeypatch: pytest.MonkeyPatch) -> None:
    _cluster(monkeypatch, {"worker": ["b:1", "c:1"]}, "worker", 1)
    monkeypatch.setenv("STOKER_RUN_KEY", "slurm-12345")
    assert job.base_run_key("mw") == "slurm-12345"
    assert job.base_run_key("mw", "mine-abcdef") == "mine-abcdef"
    assert len(job.base_run_key("mw", "abc") or "") >= 8  # the protocol's minimum
    monkeypatch.delenv("STOKER_RUN_KEY")
    monkeypatch.delenv("TF_CONFIG")
    assert job.job_run_key("single") is None
    assert job.job_rank() == 0 and job.job_world_size() == 1
