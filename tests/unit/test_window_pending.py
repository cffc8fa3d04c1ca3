"""A batch large enough to be folded at once, from a worker: the worker's window folds the
shared batch first (its columns become arrays and are let go), and the run's window must still
count and fold it. It raised IndexError on the event loop, which closed the agent's socket."""

from stoker_server.diagnosis.window import PENDING_STEP_ROWS, RunWindow


def test_a_workers_batch_that_fills_the_pending_rows_is_folded_by_both_windows() -> None:
    rows = PENDING_STEP_ROWS
    now = rows * 0.001
    window = RunWindow(1, 3600.0)
    window.add_steps(
        now=now,
        step=list(range(rows)),
        t=[i * 0.001 for i in range(rows)],
        dur=[0.001] * rows,
        wait=[0.0005] * rows,
        batch_size=[32] * rows,
        rank=0,
    )
    worker = window.workers[0]
    assert window.total_steps == worker.total_steps == rows
    assert window.sums.n == worker.sums.n >= rows - 1  # the first step may open the window
    assert window.sums.wait == worker.sums.wait
