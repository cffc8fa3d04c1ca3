"""Bytes of one live `run` message, as every browser receives it once a second per streaming
run (and once per run on connect): with the run's config and environment (before issue 39)
and without (now; the run page reads them over REST). The environment is this machine's, as
the agent collects it; the config a typical one of 20 hyperparameters, then one at the 64 KiB
limit.

    .venv/bin/python -m bench.live_message_bytes
"""

from datetime import UTC, datetime

from stoker_server.core.models import RunPublic, RunStatus, RunSummary
from stoker_server.live.hub import encode, live_run
from stoker_server.live.messages import RunMessage
from trainer_agent.telemetry.environment import collect
from trainer_agent.telemetry.nvml import shared_nvml


def _run(config: dict, environment: dict) -> dict:
    return RunPublic(
        id=1, name="bs256-prefetch", project="cifar10", tags=["baseline"], notes="",
        status=RunStatus.running, started_at=datetime.now(UTC), ended_at=None, last_seen_at=None,
        config=config, environment=environment, summary=RunSummary(steps=12_000),
    ).model_dump(mode="json")  # fmt: skip


def main() -> None:
    environment = collect(shared_nvml(), all_gpus=False)
    typical = {f"hyperparameter_{i}": 0.001 * i for i in range(20)}
    at_limit = {"vocabulary": ["token"] * 7_000}  # about 64 KiB as JSON
    for name, config in (("typical config", typical), ("config at the limit", at_limit)):
        run = _run(config, environment)
        whole = len(encode(RunMessage(run=run)))
        sent = len(encode(RunMessage(run=live_run(run))))
        print(f"{name:20} with config and environment {whole:7,} bytes, as sent now {sent:5,}")


if __name__ == "__main__":
    main()
