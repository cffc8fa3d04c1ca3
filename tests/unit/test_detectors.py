"""The diagnosis side by responsibility: the evaluation of a tick returns verdict changes and
alert transitions with their lines and does nothing else; the effects store, push and deliver
them, in that order, through what they were handed."""

import time
from pathlib import Path
from typing import Any

from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.models import (
    AlertMetric,
    AlertPublic,
    AlertRule,
    AlertState,
    Comparison,
    Run,
    RunEventPublic,
    RunStatus,
)
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.alerting import AlertEngine
from stoker_server.diagnosis.effects import DiagnosisEffects
from stoker_server.diagnosis.evaluation import evaluate
from stoker_server.diagnosis.verdict import Diagnosis, Verdict
from stoker_server.diagnosis.watched import WatchedRuns
from stoker_server.diagnosis.webhooks import Delivery
from stoker_server.ingest.agent_writes import open_run
from stoker_server.ingest.protocol import Batch, Hello
from tests.harness.support import run_coroutine

STEPS = 50


def _starved_batch(t0: float) -> Batch:
    """50 steps of 10 ms that each waited 6 ms for input: highly input-bound."""
    return Batch.model_validate(
        {
            "type": "batch",
            "seq": 1,
            "steps": {
                "step": list(range(STEPS)),
                "t": [t0 + i * 0.01 for i in range(STEPS)],
                "dur": [0.01] * STEPS,
                "wait": [0.006] * STEPS,
            },
        }
    )


def _rule(rule_id: int, metric: AlertMetric, **fields: Any) -> AlertRule:
    return AlertRule(id=rule_id, name=f"rule {rule_id}", metric=metric,
                     comparison=Comparison.ge, for_s=0.0, **fields)  # fmt: skip


def test_evaluation_returns_verdicts_and_alerts_with_their_lines(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, diagnosis_min_steps=10)
    runs = WatchedRuns(settings.diagnosis_window_s)
    starved = Run(id=1, name="starved", run_key="k1", status=RunStatus.running)
    runs.attach(starved)
    runs.observe_batch(starved, _starved_batch(time.time()))
    died = Run(id=2, name="died", run_key="k2", status=RunStatus.running)
    runs.attach(died)
    died.status = RunStatus.interrupted
    runs.observe_run(died, connected=False)  # reaped: no agent said so
    rules = AlertEngine(
        [
            _rule(1, AlertMetric.input_wait_share, threshold=0.2),
            _rule(2, AlertMetric.run_failed, threshold=1.0, keep_firing_for_s=60.0),
        ]
    )

    evaluation = evaluate(
        runs, rules, now=time.monotonic(), connected={1}, settings=settings, baseline_runs={}
    )

    verdicts = {change.diagnosis.run_id: change for change in evaluation.verdicts}
    assert verdicts[1].diagnosis.verdict == Verdict.highly_input_bound
    assert verdicts[1].previous is None
    alerts = {change.transition.run_id: change for change in evaluation.alerts}
    assert alerts.keys() == {1, 2}
    assert alerts[1].transition.state == AlertState.firing and alerts[1].live
    assert "on run 'starved'" in alerts[1].message
    # A run that ended without its agent saying so failed, and its alert says why.
    assert alerts[2].transition.rule.id == 2 and not alerts[2].live
    assert alerts[2].message.endswith("(its process died: no word from its agent)")
    # Its end is seen once; the verdict is kept, so a second tick with nothing new is quiet.
    again = evaluate(
        runs, rules, now=time.monotonic(), connected={1}, settings=settings, baseline_runs={}
    )
    assert again.verdicts == [] and again.alerts == []


class _Writer:
    """The writer's `run` on the event loop's thread, logging each data function called."""

    def __init__(self, engine: Any, log: list[str]) -> None:
        self.engine, self.log = engine, log

    async def run(self, fn: Any, /, **kwargs: Any) -> Any:
        self.log.append(f"store {fn.__name__}")
        with Session(self.engine, expire_on_commit=False) as session:
            return fn(session=session, **kwargs)


class _Publisher:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def publish_verdict(self, diagnosis: Diagnosis) -> None:
        self.log.append(f"push verdict {diagnosis.verdict}")

    def publish_event(self, run_id: int, event: RunEventPublic) -> None:
        self.log.append(f"push event {event.kind}")

    def publish_alert(self, alert: AlertPublic) -> None:
        self.log.append(f"push alert {alert.state}")


def test_effects_store_then_push_then_deliver(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, diagnosis_min_steps=10)
    engine = make_engine(settings)
    hello = Hello(type="hello", protocol=1, run_key="effects-run", host="h", name="starved")
    with Session(engine, expire_on_commit=False) as session:
        run, _ = open_run(session=session, hello=hello)
    assert run.id is not None
    runs = WatchedRuns(settings.diagnosis_window_s)
    runs.attach(run)
    runs.observe_batch(run, _starved_batch(time.time()))
    hook = {"type": "webhook", "url": "http://127.0.0.1:9/hook"}
    rules = AlertEngine([_rule(1, AlertMetric.input_wait_share, threshold=0.2, channels=[hook])])
    evaluation = evaluate(
        runs, rules, now=time.monotonic(), connected={run.id}, settings=settings,
        baseline_runs={},
    )  # fmt: skip
    log: list[str] = []
    deliveries: list[Delivery] = []

    def submit(delivery: Delivery) -> bool:
        log.append("deliver")
        deliveries.append(delivery)
        return True

    effects = DiagnosisEffects(
        writer=_Writer(engine, log),  # type: ignore[arg-type]
        publisher=_Publisher(log),
        submit_delivery=submit,
        capture_profile=None,
    )
    run_coroutine(effects.apply(evaluation))

    assert log == [
        "push verdict highly_input_bound",
        "store add_event",
        "push event verdict",
        "store apply_transition",
        "push alert firing",
        "push event alert",
        "store run_brief",
        "deliver",
    ]
    assert deliveries[0].url == hook["url"] and deliveries[0].event == "firing"
    assert deliveries[0].payload["run"]["name"] == "starved"
