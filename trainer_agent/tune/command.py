"""`stoker tune [--steps N] [--only ADVICE] -- python train.py ARGS`: prove a change first.

The script runs as `stoker run` runs it (no code change), once per trial, one trial at a time:
1. as it is: its first `fit`, for N steps, then the process ends (trainer_agent/tune/trial.py);
   this run also lists every change Stoker would advise for that fit, and why any is not tried;
2. once per change to try, the change applied inside the process (the script file is never
   touched);
3. the fastest change once more, so that its gain is measured twice and the noise is known.
Each trial is a run of one "tune" group on the server (`POST /api/v1/tune-groups`, with the
agent token); the table (trainer_agent/tune/table.py) is printed and stored with the group,
whose page overlays the trials' step times.
"""

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_agent.capture.run import command_environment
from trainer_agent.config import RunOptions, resolve_token, server_setting
from trainer_agent.delivery.classify import Route, Verdict, post, shared_http_post
from trainer_agent.figures import share_text
from trainer_agent.tune import DEFAULT_STEPS
from trainer_agent.tune.changes import ADVICE, ADVICE_ALIASES, decide_steps_per_execution
from trainer_agent.tune.table import Table, judge, render
from trainer_agent.tune.trial import NOT_APPLIED_EXIT, TUNE_ENV, UNCHANGED, TrialResult, TrialSpec

MIN_STEPS = 10
# Without --cache-memory, a cache may take this share of the memory available now.
CACHE_MEMORY_SHARE = 0.25
TUNE_GROUPS = Route("id")
TUNE_GROUPS_PATH = "/api/v1/tune-groups"
LOG_TAIL_LINES = 15
REPEAT = "repeat"


def parse_advice(values: Sequence[str] | None) -> set[str] | None:
    """`--only parallel,cache` (repeatable) as advice names; raises ValueError on an unknown
    one."""
    if not values:
        return None
    asked: set[str] = set()
    for value in values:
        for name in filter(None, (part.strip().lower() for part in value.split(","))):
            name = ADVICE_ALIASES.get(name.replace("-", "_"), name.replace("-", "_"))
            if name not in ADVICE:
                raise ValueError(f"unknown advice {name!r}: choose from {', '.join(ADVICE)}")
            asked.add(name)
    return asked


def parse_bytes(text: str) -> int:
    """`2G`, `512M`, `1000000` -> bytes."""
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in "KMGT" else text
    return int(float(number) * scale)


@dataclass
class Group:
    """The tune group as the server stores it (`POST /api/v1/tune-groups`)."""

    key: str
    command: list[str]
    cwd: str
    steps: int
    project: str
    status: str = "running"
    trials: list[dict[str, Any]] = field(default_factory=list)
    table: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": shlex.join(self.command)[:200],
            "command": self.command,
            "cwd": self.cwd,
            "steps": self.steps,
            "project": self.project,
            "status": self.status,
            "trials": self.trials,
            "table": self.table,
        }


class Store:
    """The group's copy on the server; a server that cannot take it is said once."""

    def __init__(self, server: str, token: str | None) -> None:
        self.server = server
        self.token = token
        self.group_id: int | None = None
        self.problem: str | None = None

    def save(self, group: Group) -> None:
        answer = post(
            shared_http_post, self.server, TUNE_GROUPS, TUNE_GROUPS_PATH,
            body=group.body(), token=self.token, timeout=10.0,
        )  # fmt: skip
        if answer.verdict is Verdict.DELIVERED:
            self.group_id = int(answer.body["id"])
            self.problem = None
            return
        problem = str(answer.problem) if answer.problem is not None else answer.reason
        if problem != self.problem:
            print(f"stoker tune: the table is not stored on {self.server}: {problem}")
        self.problem = problem

    @property
    def url(self) -> str | None:
        return None if self.group_id is None else f"{self.server}/#/tune/{self.group_id}"


@dataclass
class Trial:
    id: str  # UNCHANGED, a change id, or REPEAT
    change: str  # the change applied (UNCHANGED or a change id)
    label: str
    run_key: str
    steps_per_execution: int | None = None


class Tuner:
    """Runs the trials one after another and keeps the group up to date."""

    def __init__(
        self,
        command: list[str],
        *,
        steps: int,
        asked: set[str] | None,
        server: str,
        token: str | None,
        project: str | None,
        cache_budget_bytes: int,
        work_dir: str,
    ) -> None:
        self.command = command
        self.steps = steps
        self.asked = asked
        self.server = server
        self.cache_budget_bytes = cache_budget_bytes
        self.work_dir = work_dir
        self.key = uuid.uuid4().hex[:16]
        self.project = project
        self.group = Group(
            key=self.key, command=command, cwd=os.getcwd(), steps=steps,
            project=project or RunOptions().project,
        )  # fmt: skip
        self.store = Store(server, token)
        self.results: dict[str, TrialResult] = {}
        self.signature: list[str] | None = None
        self.script = _script_name(command)
        self.count = 0

    def run_trial(self, trial: Trial) -> TrialResult:
        self.count += 1
        number = self.count
        spec = TrialSpec(
            trial=trial.change,
            steps=self.steps,
            result_path=os.path.join(self.work_dir, f"trial-{number}.json"),
            claim_path=os.path.join(self.work_dir, f"trial-{number}.claim"),
            work_dir=self.work_dir,
            cache_budget_bytes=self.cache_budget_bytes,
            steps_per_execution=trial.steps_per_execution,
            signature=self.signature,
        )
        options = RunOptions.of(
            "stoker tune",
            {
                "run_name": f"tune {self.script}: {trial.label}"[:200],
                "project": self.project,
                "tags": ["tune"],
                "config": {"tune": {"group": self.key, "trial": trial.id, "change": trial.label}},
                "run_key": trial.run_key,
                "server": self.server,
            },
        )
        env = command_environment(dict(os.environ), options)
        env[TUNE_ENV] = spec.to_json()
        self.group.trials.append({"id": trial.id, "label": trial.label, "run_key": trial.run_key})
        self.store.save(self.group)
        print(f"  [{number}] {trial.label} ...", end="", flush=True)
        log_path = os.path.join(self.work_dir, f"trial-{number}.log")
        started = time.monotonic()
        code = _run(self.command, env, log_path)
        elapsed = time.monotonic() - started
        result = _read_result(spec.result_path, trial.change, code, log_path)
        print(f" {_summary(result)} ({elapsed:.0f} s)", flush=True)
        if result.status == "failed":
            print(_indented(result.error or ""), flush=True)
        return result

    def tune(self) -> int:
        where = f"{self.steps} steps per trial"
        print(f"stoker tune: {shlex.join(self.command)} ({where})", flush=True)
        began = time.monotonic()
        baseline = self.run_trial(Trial(UNCHANGED, UNCHANGED, "unchanged", self._run_key(0)))
        if baseline.status != "ok" or not baseline.steps_per_s:
            self.group.status = "failed"
            self.group.table = {"error": _failure(baseline)}
            self.store.save(self.group)
            print("stoker tune: the unchanged run gave no figures, so there is nothing to compare")
            return 1
        self.signature = baseline.signature
        changes, steps_per_execution = self._decided(baseline)
        trials: dict[str, TrialResult] = {}
        to_try = [
            c for c in changes
            if not c.get("not_tried") and (self.asked is None or c["advice"] in self.asked)
        ]  # fmt: skip
        for change in to_try:
            spe = steps_per_execution if change["advice"] == "steps_per_execution" else None
            key = self._run_key(len(trials) + 1)
            trial = Trial(change["id"], change["id"], change["label"], key, spe)
            trials[change["id"]] = self.run_trial(trial)
            self._save_table(baseline, changes, trials, None, "running")
        repeat = self._repeat_best(changes, trials, baseline, steps_per_execution)
        table = self._save_table(baseline, changes, trials, repeat, "finished")
        minutes, seconds = divmod(int(time.monotonic() - began), 60)
        header = f"\n  {self.count} trials of {self.steps} steps in {minutes} min {seconds} s:"
        print(render(table, header=header), flush=True)
        if self.store.url:
            print(f"  Stored as tune group #{self.store.group_id}: {self.store.url}", flush=True)
        return 0

    def _run_key(self, index: int) -> str:
        return f"tune-{self.key}-{index}"

    def _decided(self, baseline: TrialResult) -> tuple[list[dict[str, Any]], int | None]:
        """The unchanged run's changes with steps_per_execution decided on its step time."""
        decided, steps = [], None
        for change in baseline.changes:
            if change.get("pending"):
                compute = baseline.compute_ms_median
                change, steps = decide_steps_per_execution(
                    change, compute / 1000 if compute is not None else None,
                    baseline.input_wait_share, self.steps,
                )  # fmt: skip
            decided.append(change)
        return decided, steps

    def _repeat_best(
        self,
        changes: list[dict[str, Any]],
        trials: dict[str, TrialResult],
        baseline: TrialResult,
        steps_per_execution: int | None,
    ) -> TrialResult | None:
        fastest = judge(baseline, changes, trials, None, steps=self.steps, asked=self.asked)
        measured = [row for row in fastest.rows if row.id in trials and row.speedup is not None]
        if not measured:
            return None
        best = max(measured, key=lambda row: row.speedup or 0.0)
        change = next(c for c in changes if c["id"] == best.id)
        spe = steps_per_execution if change["advice"] == "steps_per_execution" else None
        key = self._run_key(len(trials) + 1)
        trial = Trial(REPEAT, best.id, f"{best.label} (again)", key, spe)
        return self.run_trial(trial)

    def _save_table(
        self,
        baseline: TrialResult,
        changes: list[dict[str, Any]],
        trials: dict[str, TrialResult],
        repeat: TrialResult | None,
        status: str,
    ) -> Table:
        run_keys = {t["id"]: t["run_key"] for t in self.group.trials}
        table = judge(baseline, changes, trials, repeat, steps=self.steps, asked=self.asked,
                      run_keys=run_keys)  # fmt: skip
        self.group.status = status
        self.group.table = table.as_dict()
        self.store.save(self.group)
        return table

    def interrupted(self) -> None:
        self.group.status = "interrupted"
        self.store.save(self.group)


def _script_name(command: list[str]) -> str:
    for part in command[1:] if command and "python" in Path(command[0]).name else command:
        if part.endswith(".py"):
            return Path(part).name
        if not part.startswith("-") and part != "-m":
            return part
    return Path(command[0]).name if command else "script"


def _run(command: list[str], env: dict[str, str], log_path: str) -> int:
    """Run one trial's process to its end, its output to `log_path`; Ctrl-C ends it too."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return process.wait()
        except BaseException:
            _end(process)
            raise


def _end(process: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGINT, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(log_path: str) -> str:
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _read_result(path: str, change: str, code: int, log_path: str) -> TrialResult:
    import json

    try:
        with open(path, encoding="utf-8") as file:
            return TrialResult(**json.load(file))
    except (OSError, ValueError, TypeError):
        pass
    if code == 0:
        error = (
            "the script ended without a Keras fit on the first Stoker could monitor "
            "(stoker tune measures the script's first Model.fit)"
        )
    else:
        error = f"the script exited with code {code} before its fit's end:\n{_tail(log_path)}"
    status = "not_applied" if code == NOT_APPLIED_EXIT else "failed"
    return TrialResult(trial=change, status=status, error=error)


def _summary(result: TrialResult) -> str:
    if result.status != "ok" or not result.steps_per_s:
        return _failure(result).splitlines()[0][:200]
    wait = result.input_wait_share
    wait_text = "" if wait is None else f", input wait {share_text(wait)}"
    return f"{result.steps_per_s:.3g} steps/s{wait_text}"


def _failure(result: TrialResult) -> str:
    if result.status == "ok":
        return "no steps were measured (the fit ran fewer steps than its warm-up)"
    return (result.error or result.status).strip()


def _indented(text: str) -> str:
    return "\n".join(f"      {line}" for line in text.splitlines()[1:])


def default_cache_budget() -> int:
    import psutil

    return int(psutil.virtual_memory().available * CACHE_MEMORY_SHARE)


def main(
    command: list[str],
    *,
    steps: int = DEFAULT_STEPS,
    only: Sequence[str] | None = None,
    server: str | None = None,
    token: str | None = None,
    project: str | None = None,
    cache_memory: str | None = None,
) -> int:
    """`stoker tune`: the exit code (0 once the table is printed)."""
    if not command:
        print("stoker tune: no command given (stoker tune -- python train.py)", file=sys.stderr)
        return 2
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    if steps < MIN_STEPS:
        print(f"stoker tune: --steps must be at least {MIN_STEPS}", file=sys.stderr)
        return 2
    try:
        asked = parse_advice(only)
        budget = parse_bytes(cache_memory) if cache_memory else default_cache_budget()
    except ValueError as error:
        print(f"stoker tune: {error}", file=sys.stderr)
        return 2
    setting = server_setting(server, argument="--server")
    with tempfile.TemporaryDirectory(prefix="stoker-tune-") as work_dir:
        tuner = Tuner(
            command, steps=steps, asked=asked, server=setting.url, token=resolve_token(token),
            project=project, cache_budget_bytes=budget, work_dir=work_dir,
        )  # fmt: skip
        try:
            return tuner.tune()
        except KeyboardInterrupt:
            print("\nstoker tune: interrupted", file=sys.stderr)
            tuner.interrupted()
            return 130
