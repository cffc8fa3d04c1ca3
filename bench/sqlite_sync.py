"""SQLite's `synchronous` setting, FULL (the server's) against NORMAL: wall time per commit of
one 5,000-step batch through the server's own store path (`store_batch`), in WAL mode.

    .venv/bin/python -m bench.sqlite_sync [--mode FULL|NORMAL] [--commits 200]
    strace -f -c -e trace=fsync,fdatasync .venv/bin/python -m bench.sqlite_sync --mode NORMAL

The second line counts the flushes (FULL: one fdatasync of the WAL per commit; NORMAL: at
checkpoints only), the figure that does not depend on the machine's load.
"""

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.ingest.agent_writes import open_run, store_batch
from stoker_server.ingest.protocol import Batch, Hello

ROWS = 5000


def _batch(i: int) -> Batch:
    steps = list(range(i * ROWS, (i + 1) * ROWS))
    columns = {"step": steps, "t": [1.7e9 + s for s in steps], "dur": [0.01] * ROWS}
    return Batch.model_validate({"type": "batch", "seq": i + 1, "steps": columns})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--commits", type=int, default=200)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="stoker-sqlite-sync-"))
    engine = make_engine(Settings(data_dir=data_dir))

    def mode(dbapi_connection: Any, _record: Any) -> None:  # after the server's own pragmas
        dbapi_connection.execute(f"PRAGMA synchronous={args.mode}")

    event.listen(engine, "connect", mode)
    engine.dispose()  # connections from now on take the mode asked for
    hello = Hello(type="hello", protocol=1, run_key="bench-sqlite-sync")
    with Session(engine, expire_on_commit=False) as session:
        run, _ = open_run(session=session, hello=hello)
    assert run.id is not None
    batches = [_batch(i) for i in range(args.commits)]
    started = time.perf_counter()
    with Session(engine, expire_on_commit=False) as session:
        for batch in batches:
            store_batch(session=session, run_id=run.id, stream="h:0", rank=0, batch=batch)
    elapsed = time.perf_counter() - started
    print(
        f"synchronous={args.mode}: {args.commits} commits of {ROWS} steps in {elapsed:.2f} s, "
        f"{elapsed / args.commits * 1000:.2f} ms per commit"
    )


if __name__ == "__main__":
    main()
