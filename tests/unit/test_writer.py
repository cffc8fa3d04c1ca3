"""The writer thread with a real SQLite file: a failed batch stops its stream's later batches
(so an agent's seq cursor never skips past it) until the stream connects again."""

from pathlib import Path

import pytest
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.ingest.agent_writes import BatchJob, open_run
from stoker_server.ingest.protocol import Batch, Hello, StepColumns
from stoker_server.ingest.writer import StreamFailed, Writer
from tests.harness.support import run_coroutine


def _batch(seq: int, first: int) -> Batch:
    steps = list(range(first, first + 5))
    return Batch(
        type="batch",
        seq=seq,
        steps=StepColumns(step=steps, t=[1.7e9 + s for s in steps], dur=[0.01] * 5),
    )


def _broken(seq: int) -> Batch:
    # Not valid on the wire; built unchecked so that storing it fails inside the writer.
    steps = StepColumns.model_construct(step=["not a step"], t=[1.7e9], dur=[0.01])
    return Batch.model_construct(type="batch", seq=seq, steps=steps)


def test_failed_batch_refuses_later_batches_of_its_stream_until_forgiven(tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path))
    with Session(engine, expire_on_commit=False) as session:
        hello = Hello(type="hello", protocol=1, run_key="writer-test-run", host="h")
        run, _ = open_run(session=session, hello=hello)
        other, _ = open_run(
            session=session, hello=Hello(type="hello", protocol=1, run_key="writer-other", host="h")
        )
    writer = Writer(engine)

    async def scenario() -> None:
        stream = hello.stream
        first = writer.submit_store(BatchJob(run.id, stream, 0, _broken(1)))
        second = writer.submit_store(BatchJob(run.id, stream, 0, _batch(2, 5)))
        unrelated = writer.submit_store(BatchJob(other.id, stream, 0, _batch(1, 0)))
        with pytest.raises(ValueError):
            await first
        with pytest.raises(StreamFailed):
            await second
        assert await unrelated is not None  # another run's stream is not affected
        await writer.forgive((run.id, stream))
        # The agent reconnects and resends from the failed seq on: both are stored, in order.
        assert await writer.store(BatchJob(run.id, stream, 0, _batch(1, 0))) is not None
        stored = await writer.store(BatchJob(run.id, stream, 0, _batch(2, 5)))
        assert stored is not None and stored["summary"]["steps"] == 10

    try:
        run_coroutine(scenario())
    finally:
        writer.close()
        engine.dispose()
