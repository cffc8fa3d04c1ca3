"""`stoker upload DIR`: send runs that the agent spooled to disk (or recorded offline).

Each spooled run directory holds the run's hello, its batches and, when the process ended
cleanly, its end status and final counters. Batches go to `POST /api/v1/ingest` in order and
in chunks; the server ignores seqs it already stored, so uploading twice is harmless. A run
directory is deleted once everything in it is stored.
"""

import json
import logging
import sys
from pathlib import Path
from typing import Any

import httpx

from trainer_agent.config import resolve_server, resolve_token
from trainer_agent.sender import http_chunks
from trainer_agent.spool import Spool, run_directories

log = logging.getLogger("trainer_agent")


def upload_run(directory: Path, *, server: str, token: str | None = None) -> dict[str, Any]:
    """Upload one spooled run; returns the server's run id and how many batches were sent."""
    spool = Spool(directory)
    hello = json.loads(spool.hello_path.read_text())
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = server.rstrip("/") + "/api/v1/ingest"
    sent = 0
    run_id = None
    last_seq = 0
    with httpx.Client(timeout=60) as client:
        for chunk in http_chunks(spool.batch_paths(), lambda path: path.stat().st_size):
            batches = [spool.load(path) for path in chunk]
            response = client.post(url, json={"hello": hello, "batches": batches}, headers=headers)
            response.raise_for_status()
            run_id = response.json()["run_id"]
            sent += len(batches)
            last_seq = max(last_seq, *(b["seq"] for b in batches))
            for path in chunk:
                spool.remove(path)
        end = spool.read_end() or {"status": "interrupted", "agent": None}
        final: list[dict[str, Any]] = []
        if end.get("agent"):
            # The final counters (rows dropped at the spool cap) as one last batch.
            seq = max(int(end.get("next_seq") or 0), last_seq + 1)
            final = [{"type": "batch", "seq": seq, "agent": end["agent"]}]
        payload = {
            "hello": hello,
            "batches": final,
            "end": {"type": "end", "status": end["status"]},
        }
        response = client.post(url, json=payload, headers=headers)
        response.raise_for_status()
        run_id = response.json()["run_id"]
    spool.discard()
    return {"run_id": run_id, "batches": sent, "status": end["status"]}


def main(path: Path, *, server: str | None = None, token: str | None = None) -> int:
    directories = run_directories(path)
    if not directories:
        print(f"no spooled runs under {path}", file=sys.stderr)
        return 1
    target = resolve_server(server)
    failed = 0
    for directory in directories:
        try:
            result = upload_run(directory, server=target, token=resolve_token(token))
        except (httpx.HTTPError, OSError, ValueError, KeyError) as error:
            failed += 1
            print(f"{directory}: upload failed: {error}", file=sys.stderr)
            continue
        print(
            f"{directory}: {result['batches']} batches → run {result['run_id']} "
            f"({result['status']}) on {target}"
        )
    return 1 if failed else 0
