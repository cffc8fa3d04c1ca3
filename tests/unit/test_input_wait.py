"""Matching steps to the stamps of the elements they consumed (pure Python, no TensorFlow)."""

import itertools
from typing import Any

import pytest

from trainer_agent.capture import input_wait
from trainer_agent.capture.input_wait import Execution, Stamp, StampTable, StepRow


# The matching returns plain tuples (input_wait.Row: see `Stamp` for why); the tests read
# them by field name.
def split_execution(*args: Any, **kwargs: Any) -> list[StepRow]:
    return [StepRow(*row) for row in input_wait.split_execution(*args, **kwargs)]


class WaitResolver(input_wait.WaitResolver):
    def resolve(self, *args: Any, **kwargs: Any) -> list[StepRow]:  # type: ignore[override]
        return [StepRow(*row) for row in super().resolve(*args, **kwargs)]


def stamps(generation: int, times: list[float], size: int = 32) -> dict[tuple[int, int], Stamp]:
    return {(generation, i): Stamp(ts, size) for i, ts in enumerate(times)}


def test_split_execution_single_step_wait_is_stamp_minus_begin() -> None:
    execution = Execution(first_step=3, n=1, begin=10.0, end=10.5, epoch_start=False)
    (row,) = split_execution(execution, [Stamp(10.2, 64)])
    assert (row.step, row.start, row.dur, row.batch_size) == (3, 10.0, 0.5, 64)
    assert row.wait == pytest.approx(0.2)


def test_split_execution_prefetched_element_has_no_wait() -> None:
    execution = Execution(first_step=0, n=1, begin=10.0, end=10.5, epoch_start=False)
    (row,) = split_execution(execution, [Stamp(9.0, None)])
    assert row.wait == 0.0


def test_split_execution_many_steps_solves_compute_and_keeps_total() -> None:
    # Compute 0.1 s per step; elements arrive every 0.3 s, so each of 4 steps waits 0.2 s
    # (the first waits 0.3 s from the begin).
    ready = [10.3, 10.6, 10.9, 11.2]
    execution = Execution(first_step=8, n=4, begin=10.0, end=11.3, epoch_start=False)
    rows = split_execution(execution, [Stamp(t, 16) for t in ready])
    assert [r.step for r in rows] == [8, 9, 10, 11]
    assert [r.wait for r in rows] == pytest.approx([0.3, 0.2, 0.2, 0.2], abs=1e-6)
    assert sum(r.dur for r in rows) == pytest.approx(1.3)


def test_split_execution_without_stamps_splits_time_and_has_no_wait() -> None:
    execution = Execution(first_step=0, n=2, begin=1.0, end=2.0, epoch_start=True)
    rows = split_execution(execution, None)
    assert [(r.step, r.dur, r.wait) for r in rows] == [(0, 0.5, None), (1, 0.5, None)]


def test_resolver_follows_new_iterator_each_epoch_and_skips_warmup_iterator() -> None:
    # Generation 1 is a warm-up iterator (one element pulled before training); generation 2
    # is epoch 1, generation 3 epoch 2.
    ring = {**stamps(1, [0.5]), **stamps(2, [1.1, 1.3]), **stamps(3, [2.2, 2.3])}
    executions = [
        Execution(0, 1, begin=1.0, end=1.2, epoch_start=True),
        Execution(1, 1, begin=1.2, end=1.4, epoch_start=False),
        Execution(2, 1, begin=2.0, end=2.4, epoch_start=True),
        Execution(3, 1, begin=2.4, end=2.5, epoch_start=False),
    ]
    rows = WaitResolver().resolve(executions, StampTable.of(ring))
    assert [r.wait for r in rows] == pytest.approx([0.1, 0.1, 0.2, 0.0])


def test_resolver_keeps_iterator_across_epochs_when_none_is_new() -> None:
    ring = stamps(1, [1.0, 1.5, 2.5])
    executions = [
        Execution(0, 1, begin=1.0, end=1.4, epoch_start=True),
        Execution(1, 1, begin=1.4, end=1.8, epoch_start=False),
        Execution(2, 1, begin=2.0, end=2.6, epoch_start=True),
    ]
    rows = WaitResolver().resolve(executions, StampTable.of(ring))
    assert [r.wait for r in rows] == pytest.approx([0.0, 0.1, 0.5])


def test_resolver_overwritten_stamps_give_unknown_wait() -> None:
    ring = {(1, 0): Stamp(1.0, 8), (1, 2): Stamp(1.9, 8)}
    executions = [
        Execution(0, 1, begin=1.0, end=1.5, epoch_start=True),
        Execution(1, 1, begin=1.5, end=1.8, epoch_start=False),
        Execution(2, 1, begin=1.8, end=2.0, epoch_start=False),
    ]
    rows = WaitResolver().resolve(executions, StampTable.of(ring))
    assert [r.wait for r in rows] == pytest.approx([0.0, None, 0.1])


def test_resolver_first_step_of_run_does_not_count_wait() -> None:
    ring = stamps(1, [1.8])
    executions = [Execution(0, 1, begin=1.0, end=2.0, epoch_start=True, count_wait=False)]
    (row,) = WaitResolver().resolve(executions, StampTable.of(ring))
    assert row.wait is None
    assert row.batch_size == 32


def test_split_execution_wait_counts_from_the_request_not_the_begin() -> None:
    # The train function asked for the element 1 ms after the batch-begin hook.
    execution = Execution(first_step=5, n=1, begin=10.0, end=10.5, epoch_start=False)
    (row,) = split_execution(execution, [Stamp(10.201, 64, requested=10.001)])
    assert row.wait == pytest.approx(0.2)
    assert (row.start, row.dur) == (10.0, 0.5)


def test_split_execution_element_waiting_in_the_buffer_has_no_wait_after_the_begin() -> None:
    # Handed over 30 µs after the request, 1 ms after the begin: no wait, not 1 ms.
    execution = Execution(first_step=0, n=1, begin=10.0, end=10.03, epoch_start=False)
    (row,) = split_execution(execution, [Stamp(10.00103, 8, requested=10.001)])
    assert row.wait == pytest.approx(0.00003)


def test_split_execution_steps_asking_in_turn_wait_their_blocked_time() -> None:
    # Each step asks for its element after the previous one computed: no overlap, so the
    # idle time of the chain is the time each fetch blocked. The call took 1 ms to the first
    # request, its return 1 ms after the last step.
    execution = Execution(first_step=8, n=3, begin=10.0, end=10.901, epoch_start=False)
    stamps_ = [
        Stamp(10.1, 16, requested=10.001),
        Stamp(10.3001, 16, requested=10.3),
        Stamp(10.7, 16, requested=10.5),
    ]
    rows = split_execution(execution, stamps_)
    assert [r.start for r in rows] == pytest.approx([10.0, 10.3, 10.5], abs=2e-4)
    assert [r.dur for r in rows] == pytest.approx([0.3, 0.2, 0.401], abs=2e-4)
    assert [r.wait for r in rows] == pytest.approx([0.099, 0.0001, 0.2], abs=2e-4)
    assert sum(r.dur for r in rows) == pytest.approx(0.901)


def test_split_execution_return_path_is_no_steps_compute() -> None:
    # A starved execution of 4 steps: each element is handed over 50 ms after the last, each
    # step computes 20 ms, and the train function's call takes 2 ms to the first request and
    # its return 2 ms after the last step's compute. The return path is once per call: taken
    # for compute, each step would compute 22 ms and the first three lose 2 ms of wait each.
    begin, compute, path = 100.0, 0.020, 0.002
    handed = [begin + 0.012 + 0.05 * j for j in range(4)]
    stamps_ = [Stamp(handed[0], 64, requested=begin + path)]
    stamps_ += [Stamp(h, 64, requested=prev + 0.0005) for prev, h in itertools.pairwise(handed)]
    end = handed[-1] + compute + path
    execution = Execution(first_step=5, n=4, begin=begin, end=end, epoch_start=False)
    execution.returned = end
    rows = split_execution(execution, stamps_)
    assert [r.wait for r in rows] == pytest.approx([0.010, 0.030, 0.030, 0.030], abs=1e-6)
    assert sum(r.dur for r in rows) == pytest.approx(end - begin)


def test_split_execution_fetches_overlapping_compute_count_only_the_idle_time() -> None:
    # Keras's execution loop asks for element j + 1 as soon as j is handed over, while step
    # j computes (0.2 s). Each element takes 0.3 s to make: every fetch blocks 0.3 s, but
    # the steps lose only 0.1 s each after the first (which waits from the begin).
    execution = Execution(first_step=4, n=3, begin=10.0, end=11.1, epoch_start=False)
    stamps_ = [
        Stamp(10.3, 16, requested=10.0),
        Stamp(10.6, 16, requested=10.3),
        Stamp(10.9, 16, requested=10.6),
    ]
    rows = split_execution(execution, stamps_)
    assert [r.wait for r in rows] == pytest.approx([0.3, 0.1, 0.1], abs=1e-6)
    assert [r.start for r in rows] == pytest.approx([10.0, 10.5, 10.8], abs=1e-6)
    assert [r.dur for r in rows] == pytest.approx([0.5, 0.3, 0.3], abs=1e-6)


def test_split_execution_prefetched_elements_overlapping_compute_do_not_wait() -> None:
    # Elements were ready long before their steps: the chain never idles after the first.
    execution = Execution(first_step=0, n=4, begin=10.0, end=10.81, epoch_start=False)
    stamps_ = [Stamp(10.01 + 0.2 * j, 8, requested=10.0 + 0.2 * j) for j in range(4)]
    rows = split_execution(execution, stamps_)
    assert rows[0].wait == pytest.approx(0.01)
    assert [r.wait for r in rows[1:]] == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)


def test_split_execution_requests_ahead_of_the_step_count_from_the_begin() -> None:
    # A later asynchronous stage (a device prefetch) asked before the step began.
    execution = Execution(first_step=0, n=1, begin=10.0, end=10.5, epoch_start=False)
    (row,) = split_execution(execution, [Stamp(10.2, 8, requested=9.5)])
    assert row.wait == pytest.approx(0.2)
    (row,) = split_execution(execution, [Stamp(9.9, 8, requested=9.5)])
    assert row.wait == 0.0


def test_stamp_table_keeps_request_times() -> None:
    table = StampTable.of({(1, 0): Stamp(2.0, 4, requested=1.5), (1, 1): Stamp(3.0, None)})
    assert table.get((1, 0)) == Stamp(2.0, 4, requested=1.5)
    assert table.get((1, 1)) == Stamp(3.0, None, requested=None)


def test_split_execution_epoch_end_work_after_the_return_is_not_compute() -> None:
    # The execution of the epoch's last steps returned at 11.1; Keras's epoch-end work ran
    # until 11.25. The steps still lost 0.1 s each, and the last step's row runs to the end.
    execution = Execution(first_step=4, n=3, begin=10.0, end=11.25, epoch_start=False)
    execution.returned = 11.1
    stamps_ = [
        Stamp(10.3, 16, requested=10.0),
        Stamp(10.6, 16, requested=10.3),
        Stamp(10.9, 16, requested=10.6),
    ]
    rows = split_execution(execution, stamps_)
    assert [r.wait for r in rows] == pytest.approx([0.3, 0.1, 0.1], abs=1e-6)
    assert sum(r.dur for r in rows) == pytest.approx(1.25)


def test_resolver_estimates_the_return_path_from_recent_calls_not_one_that_traced() -> None:
    # Starved executions of 4 steps as in the test above (20 ms compute, call and return
    # paths 2 ms, an element every 50 ms); the third call traces again first (1 s to its
    # first request). Its return path is as short as ever: its waits are those of the others.
    compute, path, ring, executions = 0.020, 0.002, {}, []
    for call in range(4):
        begin = 100.0 + 10.0 * call
        entry = 1.0 if call == 2 else path
        handed = [begin + entry + 0.010 + 0.05 * j for j in range(4)]
        requests = [begin + entry] + [h + 0.0005 for h in handed[:-1]]
        for j in range(4):
            ring[(1, 4 * call + j)] = Stamp(handed[j], 64, requested=requests[j])
        end = handed[-1] + compute + path
        execution = Execution(4 * call, 4, begin=begin, end=end, epoch_start=call == 0)
        execution.returned = end
        executions.append(execution)
    rows = WaitResolver().resolve(executions, StampTable.of(ring))
    waits = [[r.wait for r in rows[4 * call : 4 * call + 4]] for call in range(4)]
    for call in range(4):
        assert waits[call] == pytest.approx([0.010, 0.030, 0.030, 0.030], abs=1e-6), call


@pytest.mark.parametrize("steps_per_execution", [1, 32])
def test_a_second_of_steps_leaves_no_object_per_step_for_pythons_gc(
    steps_per_execution: int,
) -> None:
    """CI guard, counted: the stamps read, the rows matched and the columns the sender takes
    hold no object per step that Python's cyclic GC keeps tracking (plain tuples of numbers
    and lists of them only). A second of short steps held as class instances (the dataclass
    rows, NamedTuple stamps and `zip(*rows)` before) reached the oldest generation and set
    off a full collection of the process's TensorFlow objects, ~130 ms on whichever thread,
    every few seconds (input_wait.Stamp). The calls themselves (`Execution`) are counted out:
    the training thread makes one per call."""
    import gc

    import numpy as np

    from trainer_agent.capture.recorder import ColumnBuffer

    n, steps = steps_per_execution, 8192
    table = np.zeros((steps, 5))
    table[:, 0] = 10.0 + np.arange(steps) * 1e-3  # requested
    table[:, 1] = table[:, 0] + 2e-4  # handed over
    table[:, 2] = 1  # generation
    table[:, 3] = np.arange(steps)  # index
    table[:, 4] = 32  # batch size
    executions = [
        Execution(i, n, begin=10.0 + i * 1e-3, end=10.0 + (i + n) * 1e-3, epoch_start=i == 0)
        for i in range(0, steps, n)
    ]
    buffer = ColumnBuffer("steps", 10**6)

    def tracked() -> int:
        gc.collect()  # untracks the tuples and dicts that hold only numbers
        return len(gc.get_objects())

    before = tracked()
    stamps_ = StampTable(table)
    rows = input_wait.WaitResolver().resolve(executions, stamps_)
    buffer.extend(rows)
    columns = buffer.drain()
    added = tracked() - before
    assert len(rows) == steps and columns is not None and len(columns["wait"]) == steps
    assert sum(1 for w in columns["wait"] if w is not None) >= steps - n
    assert added <= 20, f"{added} objects tracked for {steps} steps"
