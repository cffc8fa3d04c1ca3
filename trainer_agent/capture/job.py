"""Which job this process belongs to: the run key every worker of one job computes alike.

All workers of a distributed job (e.g. `MultiWorkerMirroredStrategy`) report into one run.
They share no state before training, so each derives the same key from what they share:

1. `run_key=` given to `StokerCallback` / `Monitor`, else `STOKER_RUN_KEY`: the user's key;
2. else, with a `TF_CONFIG` cluster: a hash of the sorted cluster spec, the run's name and
   the scheduler's job id when there is one (`SLURM_JOB_ID`), so another cluster (other
   addresses) or another run name is another run;
3. else None: a single process, whose session draws a random key.

Each process numbers its runs per key: the first `fit()` (or `Monitor`) uses the key as is,
the n-th appends `.n`. Every worker runs the same script, so the n-th fit of one worker
joins the n-th fit of the others, and a second fit is a second run. A worker that restarts
computes the same key and rejoins its run. Relaunching the same job on the same addresses
with the same name also resumes it: set `STOKER_RUN_KEY` (e.g. your scheduler's job id)
to make each launch its own run.
"""

import hashlib
import json
import os
import threading
from collections import Counter
from typing import Any

from trainer_agent.settings import agent_setting

# Task types that train, in the order TensorFlow ranks them (the chief, then the workers).
TRAINING_TASKS = ("chief", "master", "worker")

_lock = threading.Lock()
_runs_per_key: Counter[str] = Counter()


def tf_config() -> dict[str, Any]:
    """`TF_CONFIG` as a dict; {} when it is unset or not JSON."""
    try:
        value = json.loads(os.environ.get("TF_CONFIG", "") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _training_tasks(cluster: dict[str, Any]) -> list[tuple[str, int]]:
    """(task type, index) of every training task, in rank order."""
    tasks = []
    for kind in TRAINING_TASKS:
        addresses = cluster.get(kind)
        if isinstance(addresses, list):
            tasks += [(kind, index) for index in range(len(addresses))]
    return tasks


def job_rank() -> int:
    """This worker's rank: `STOKER_RANK`, `RANK`, else its place among `TF_CONFIG`'s training
    tasks (the chief first, then the workers by index), else 0."""
    rank = agent_setting("rank")
    if rank is not None:
        return rank
    value = os.environ.get("RANK", "")
    if value.isdigit():
        return int(value)
    config = tf_config()
    raw_task, raw_cluster = config.get("task"), config.get("cluster")
    task: dict[str, Any] = raw_task if isinstance(raw_task, dict) else {}
    cluster: dict[str, Any] = raw_cluster if isinstance(raw_cluster, dict) else {}
    me = (task.get("type"), task.get("index"))
    tasks = _training_tasks(cluster)
    if me in tasks:
        return tasks.index(me)
    index = task.get("index")
    return index if isinstance(index, int) and index >= 0 else 0


def job_world_size() -> int:
    """How many training tasks the job has (1 without a `TF_CONFIG` cluster)."""
    cluster = tf_config().get("cluster")
    return max(1, len(_training_tasks(cluster))) if isinstance(cluster, dict) else 1


def base_run_key(run_name: str, run_key: str | None = None) -> str | None:
    """The job's key before numbering (see the module's docstring), or None."""
    given = run_key or agent_setting("run_key")
    if given:
        # The protocol wants keys of 8 to 128 characters (room is left for the `.n`).
        return given[:100] if len(given) >= 8 else f"run-key-{given}"
    cluster = tf_config().get("cluster")
    if not isinstance(cluster, dict) or not _training_tasks(cluster):
        return None
    identity = json.dumps(
        {"cluster": cluster, "name": run_name, "job": os.environ.get("SLURM_JOB_ID", "")},
        sort_keys=True,
    )
    return "job-" + hashlib.sha256(identity.encode()).hexdigest()[:32]


def job_run_key(run_name: str, run_key: str | None = None) -> str | None:
    """The key of the run this process's next `fit()` / `Monitor` joins, or None for a
    process outside any job (it gets a random key). Call it once per run: it counts."""
    base = base_run_key(run_name, run_key)
    if base is None:
        return None
    with _lock:
        n = _runs_per_key[base]
        _runs_per_key[base] += 1
    return base if n == 0 else f"{base}.{n}"
