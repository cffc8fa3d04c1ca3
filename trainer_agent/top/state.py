"""What `stoker top` knows about the server's runs, built from the live socket's messages and
the REST reads, and the figures it shows per run. No I/O and no drawing here."""

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

# The steps a run's figures are read from: the last WINDOW_S seconds of its steps (agent clock).
WINDOW_S = 10.0
# Points kept per run for the sparklines of the opened run.
HISTORY_POINTS = 240

SORT_KEYS = ("name", "project", "steps/s", "step time", "input wait", "gpu")

# The verdicts' colours, as the browser shows them (red, amber, green). Their words are the
# server's, sent with each verdict (`verdict_label`): `top` keeps no copy of them.
VERDICT_STYLES = {
    "highly_input_bound": "red",
    "moderately_input_bound": "yellow",
    "not_input_bound": "green",
    "stalled": "magenta",
    "insufficient_data": "bright_black",
}


@dataclass
class StepPoint:
    step: int
    t: float
    dur: float
    wait: float | None


@dataclass
class GpuReading:
    """The latest device reading of one GPU of one worker."""

    rank: int
    gpu: int
    util: float | None = None
    sm_util: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None


@dataclass
class RunView:
    """One run as `top` holds it."""

    run: dict[str, Any]
    steps: deque[StepPoint] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    gpus: dict[tuple[int, int], GpuReading] = field(default_factory=dict)
    diagnosis: dict[str, Any] | None = None

    @property
    def id(self) -> int:
        return int(self.run["id"])

    @property
    def name(self) -> str:
        return str(self.run.get("name") or f"run {self.id}")

    @property
    def project(self) -> str:
        return str(self.run.get("project") or "")

    @property
    def status(self) -> str:
        return str(self.run.get("status") or "")

    @property
    def summary(self) -> dict[str, Any]:
        return self.run.get("summary") or {}

    @property
    def step(self) -> int:
        """Steps done: the summary's count, or past the newest step held when that is newer."""
        done = int(self.summary.get("steps") or 0)
        return max(done, self.steps[-1].step + 1) if self.steps else done

    def recent(self) -> list[StepPoint]:
        if not self.steps:
            return []
        since = self.steps[-1].t - WINDOW_S
        return [p for p in self.steps if p.t >= since]

    @property
    def steps_per_s(self) -> float | None:
        if self.verdict == "stalled":  # the server sees no steps coming: not the last pace
            return 0.0
        points = self.recent()
        if len(points) < 2 or points[-1].t <= points[0].t:
            return None
        return (points[-1].step - points[0].step) / (points[-1].t - points[0].t)

    @property
    def step_time_s(self) -> float | None:
        """The server's figure, as the browser shows it: the run's median step time over the
        whole run (so far)."""
        median_ms = self.summary.get("step_time_ms_median")
        return None if median_ms is None else median_ms / 1000

    @property
    def summary_window(self) -> str:
        """What the summary's figures cover, as the browser says it."""
        return "whole run so far" if self.status == "running" else "whole run"

    @property
    def wait_share(self) -> float | None:
        """The server's figure: the live diagnosis window's, else the run summary's (whose
        window `wait_window` names)."""
        if self.diagnosis is not None and self.diagnosis.get("input_wait_share") is not None:
            return float(self.diagnosis["input_wait_share"])
        share = self.summary.get("input_wait_share")
        return None if share is None else float(share)

    @property
    def wait_window(self) -> str:
        """What `wait_share` covers: "last 30 s", "whole run"."""
        if self.diagnosis is not None and self.diagnosis.get("input_wait_share") is not None:
            return str(self.diagnosis.get("window_label") or "")
        return self.summary_window

    @property
    def verdict(self) -> str | None:
        if self.diagnosis is not None:
            return str(self.diagnosis.get("verdict"))
        verdict = self.summary.get("verdict")
        return None if verdict is None else str(verdict)

    @property
    def verdict_label(self) -> str:
        """The server's words for the verdict shown."""
        if self.diagnosis is not None and self.diagnosis.get("verdict_label"):
            return str(self.diagnosis["verdict_label"])
        return str(self.summary.get("verdict_label") or "not measured")

    @property
    def gpu_util(self) -> float | None:
        """The mean utilization of its GPUs (for sorting)."""
        utils = [g.util for g in self.gpus.values() if g.util is not None]
        return sum(utils) / len(utils) if utils else None

    def add_steps(self, data: dict[str, Any]) -> None:
        """Steps from `GET /runs/{id}/steps` (columns), newer than those held."""
        last = self.steps[-1].step if self.steps else -1
        waits = data.get("wait") or [None] * len(data.get("step", []))
        for step, t, dur, wait in zip(data["step"], data["t"], data["dur"], waits, strict=True):
            if step > last and dur is not None and math.isfinite(dur):
                self.steps.append(StepPoint(int(step), float(t), float(dur), wait))
                last = step

    def set_samples(self, series: list[dict[str, Any]]) -> None:
        """The latest non-null value of each field, per rank and GPU."""
        for one in series:
            key = (int(one.get("rank", 0)), int(one["gpu"]))
            reading = self.gpus.setdefault(key, GpuReading(rank=key[0], gpu=key[1]))
            for name in ("util", "sm_util", "mem_used", "mem_total"):
                values = [v for v in one.get(name) or [] if v is not None]
                if values:
                    setattr(reading, name, float(values[-1]))

    def last_t(self) -> float | None:
        return self.steps[-1].t if self.steps else None


@dataclass
class TopState:
    """Every run seen, the firing alerts, and the view's choices (sort, filter, opened run)."""

    runs: dict[int, RunView] = field(default_factory=dict)
    firing: dict[int, dict[str, Any]] = field(default_factory=dict)  # alert id → alert
    sort: str = "steps/s"
    descending: bool = True
    project: str | None = None
    show_ended: bool = False
    ended_read: bool = False  # the latest ended runs were read (they change no more)
    selected: int | None = None  # run id
    opened: int | None = None  # run id
    notice: str = ""  # the server's last notice on the live socket
    problem: str = ""  # why the last poll failed, until one succeeds
    connected: bool = False

    # -- what the server says ----------------------------------------------------------------

    def apply(self, message: dict[str, Any]) -> None:
        """One message of `/api/v1/live` (docs/api.md, "Live updates")."""
        kind = message.get("type")
        if kind == "run":
            self.set_run(message["run"])
        elif kind == "run_deleted":
            self.runs.pop(int(message["run_id"]), None)
            if self.opened == message["run_id"]:
                self.opened = None
        elif kind == "verdict":
            view = self.runs.get(int(message["run_id"]))
            if view is not None:
                view.diagnosis = message["diagnosis"]
        elif kind == "alert":
            self.set_alert(message["alert"])
        elif kind == "notice":
            self.notice = str(message.get("message", ""))

    def set_run(self, run: dict[str, Any]) -> None:
        view = self.runs.get(int(run["id"]))
        if view is None:
            self.runs[int(run["id"])] = RunView(run=run)
        else:
            view.run = run

    def set_alert(self, alert: dict[str, Any]) -> None:
        if alert.get("state") == "firing":
            self.firing[int(alert["id"])] = alert
        else:
            self.firing.pop(int(alert["id"]), None)

    def alerts_of(self, run_id: int) -> list[dict[str, Any]]:
        return [a for a in self.firing.values() if a.get("run_id") == run_id]

    # -- what the view shows -----------------------------------------------------------------

    def projects(self) -> list[str]:
        return sorted({v.project for v in self.runs.values() if self._status_shown(v)})

    def _status_shown(self, view: RunView) -> bool:
        return self.show_ended or view.status == "running"

    def shown(self) -> list[RunView]:
        """The runs listed, filtered and sorted; runs without a figure sort last."""
        views = [
            v
            for v in self.runs.values()
            if self._status_shown(v) and (self.project is None or v.project == self.project)
        ]
        text_key = {"name": lambda v: v.name.lower(), "project": lambda v: v.project.lower()}
        if self.sort in text_key:
            return sorted(views, key=text_key[self.sort], reverse=self.descending)
        figure = {
            "steps/s": lambda v: v.steps_per_s,
            "step time": lambda v: v.step_time_s,
            "input wait": lambda v: v.wait_share,
            "gpu": lambda v: v.gpu_util,
        }[self.sort]
        known = [v for v in views if figure(v) is not None]
        unknown = sorted((v for v in views if figure(v) is None), key=lambda v: -v.id)
        known.sort(key=lambda v: (figure(v), v.id), reverse=self.descending)
        return known + unknown

    def running_ids(self) -> list[int]:
        return [v.id for v in self.runs.values() if v.status == "running"]

    # -- keys --------------------------------------------------------------------------------

    def next_sort(self) -> None:
        self.sort = SORT_KEYS[(SORT_KEYS.index(self.sort) + 1) % len(SORT_KEYS)]
        self.descending = self.sort not in ("name", "project")

    def next_project(self) -> None:
        """All projects, then each in turn, then all again."""
        choices: list[str | None] = [None, *self.projects()]
        index = choices.index(self.project) if self.project in choices else 0
        self.project = choices[(index + 1) % len(choices)]
        self.selected = None

    def move(self, by: int) -> None:
        ids = [v.id for v in self.shown()]
        if not ids:
            self.selected = None
            return
        index = ids.index(self.selected) if self.selected in ids else (-1 if by > 0 else 0)
        self.selected = ids[max(0, min(len(ids) - 1, index + by))]

    def selected_view(self) -> RunView | None:
        ids = [v.id for v in self.shown()]
        if self.selected not in ids:
            self.selected = ids[0] if ids else None
        return None if self.selected is None else self.runs[self.selected]

    def open_selected(self) -> None:
        view = self.selected_view()
        self.opened = None if view is None else view.id
