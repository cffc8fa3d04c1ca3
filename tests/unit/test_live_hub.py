"""The live hub keeps no per-run state that grows for ever, and no client's queue passes its
byte budget (issue 39)."""

import asyncio

from stoker_server.live.hub import LiveClient, LiveHub
from tests.harness.support import run_coroutine


def test_push_times_are_forgotten_once_they_no_longer_delay_a_push() -> None:
    """Five waves of 200 runs, each wave more than one push interval after the last: only
    the latest wave's push times are held (every run ever pushed was held before)."""

    async def scenario() -> int:
        hub = LiveHub(16, run_interval_s=0.01)
        for wave in range(5):
            for run_id in range(wave * 200, wave * 200 + 200):
                hub.publish_run({"id": run_id, "name": f"run {run_id}"})
            await asyncio.sleep(0.02)  # at least two intervals pass
        hub.publish_run({"id": 10_000, "name": "last"})
        return hub.remembered_pushes

    assert run_coroutine(scenario()) <= 201


def test_a_clients_queue_never_holds_more_than_its_byte_budget() -> None:
    async def scenario() -> tuple[int, int, int]:
        client = LiveClient(queue=asyncio.Queue(maxsize=100_000), max_bytes=10_000)
        most = 0
        for i in range(1_000):
            client.offer("x" * (100 + i % 900))
            most = max(most, client.queued_bytes)
        client.offer("y" * 20_000)  # alone over the budget: dropped, counted
        return most, client.dropped, sum(len(m) for m in client.queue._queue)  # type: ignore[attr-defined]

    most, dropped, held = run_coroutine(scenario())
    assert most <= 10_000 and held <= 10_000 and dropped > 900


def test_run_messages_leave_config_and_environment_out() -> None:
    async def scenario() -> str:
        hub = LiveHub(16)
        client = hub.connect()
        hub.publish_run({"id": 1, "name": "r", "config": {"a": 1}, "environment": {"b": 2}})
        return await client.next_message()

    assert run_coroutine(scenario()) == '{"type":"run","run":{"id":1,"name":"r"}}'
