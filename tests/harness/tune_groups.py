"""`stoker tune`'s groups as the tests post them: the body trainer_agent/tune/command.py posts
(`POST /api/v1/tune-groups`), assembled from its trials and table rows."""

import shlex
from typing import Any

import httpx

from tests.harness.support import ServerProcess

PARALLEL_AFTER = ".map(slow_decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)"


def edit(
    where: str, before: str = ".map(slow_decode)", after: str = PARALLEL_AFTER
) -> dict[str, Any]:
    """A row's line to edit."""
    path, _, line = where.rpartition(":")
    return {"where": where, "path": f"/w/{path}", "line": int(line), "before": before,
            "after": after}  # fmt: skip


def group_body(
    key: str,
    command: list[str],
    trials: list[tuple[str, str, str]],
    rows: list[dict[str, Any]],
    *,
    project: str,
    steps: int = 200,
    status: str = "finished",
    cwd: str = "/w",
    **table: Any,
) -> dict[str, Any]:
    """The group: `trials` as (id, label, run key); `table` adds best, noise, conclusion, ..."""
    return {
        "key": key, "name": shlex.join(command), "project": project, "command": command,
        "cwd": cwd, "steps": steps, "status": status,
        "trials": [{"id": i, "label": label, "run_key": run_key} for i, label, run_key in trials],
        "table": {"rows": rows, "steps": steps, **table},
    }  # fmt: skip


def post_group(
    server: ServerProcess, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.post(f"{server.url}/api/v1/tune-groups", json=body, headers=headers, timeout=30)
