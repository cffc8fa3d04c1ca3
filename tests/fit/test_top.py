"""`stoker top` against a real server: `--once` frames, the interactive view in a real terminal
(tmux, 80x24, keys sent, the screen read back), a real Keras training, a server that is down
and a wrong token."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ARTIFACTS, require
from tests.harness.detect_support import FAST_DETECTORS, ScriptedAgent
from tests.harness.support import REPO, ServerProcess, free_port, wait_for
from trainer_agent.figures import ms_text

VIEW = "look-" + uuid.uuid4().hex[:8]
ADMIN = "change-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Reading and changing locked, delivery open (on loopback, docs/security.md).
    env = {**FAST_DETECTORS, "STOKER_VIEW_TOKEN": VIEW, "STOKER_ADMIN_TOKEN": ADMIN}
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("top-server"), env=env).start()
    yield process
    process.stop()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    env.update({"STOKER_VIEW_TOKEN": VIEW, "COLUMNS": "80", "LINES": "24", **extra})
    return env


def top_once(server: ServerProcess, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainer_agent.cli", "top", "--once", "--server", server.url,
         *args],
        cwd=REPO, env=_env(**env), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


class Feeder:
    """Keeps a scripted run stepping live: `dur`-second steps waiting `wait` for input, on the
    agent's clock (so steps/s is 1/dur whatever this machine's pace), with a reading of each
    of its GPUs per batch (`gpus`: per GPU its utilization, SM activity and memory used)."""

    def __init__(
        self, agent: ScriptedAgent, *, dur: float, wait: float,
        gpus: list[tuple[float, float | None, float]],
    ) -> None:  # fmt: skip
        self.agent, self.dur, self.wait, self.gpus = agent, dur, wait, gpus
        self.batches = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        agent, n = self.agent, 5
        while not self._stop.is_set():
            starts = [agent.t + i * self.dur for i in range(n)]
            steps = {"step": list(range(agent.step, agent.step + n)), "t": starts,
                     "dur": [self.dur] * n, "wait": [self.wait] * n,
                     "batch_size": [32] * n}  # fmt: skip
            device = {"t": [starts[-1]] * len(self.gpus), "gpu": list(range(len(self.gpus))),
                      "util": [g[0] for g in self.gpus], "sm_util": [g[1] for g in self.gpus],
                      "mem_used": [g[2] for g in self.gpus], "mem_total": [16e9] * len(self.gpus),
                      "temp_c": [60.0] * len(self.gpus)}  # fmt: skip
            agent.step += n
            agent.t += n * self.dur
            agent.send(steps=steps, device=device)
            self.batches += 1
            self._stop.wait(n * self.dur)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def live_runs(server: ServerProcess) -> Iterator[tuple[str, str, int]]:
    """Two live runs in two projects (one starved for input, one fed) and an ended run."""
    tag = uuid.uuid4().hex[:4]
    starved = ScriptedAgent(server, name=f"starved-{tag}", project=f"v-{tag}")
    fed = ScriptedAgent(server, name=f"fed-{tag}", project=f"s-{tag}")
    ended = ScriptedAgent(server, name=f"ended-{tag}", project=f"v-{tag}")
    ended.steps(10, dur=0.02, wait=0.0)
    ended.end("finished")
    feeders = [
        Feeder(starved, dur=0.02, wait=0.012, gpus=[(35.0, 21.0, 4e9), (33.0, 19.0, 6e9)]),
        Feeder(fed, dur=0.04, wait=0.0, gpus=[(97.0, None, 4e9)]),  # a GPU without GPM
    ]
    wait_for(lambda: all(f.batches >= 4 for f in feeders), what="both runs stepping")
    yield tag, f"starved-{tag}", starved.run_id
    for feeder in feeders:
        feeder.stop()
    for agent in (starved, fed):
        agent.end("finished")  # so that the next test lists only its own runs as running
        agent.close()
    ended.close()


def _row(frame: str, name: str) -> str:
    """The line of run `name`, whose name may be cut (with an ellipsis) to fit 80 columns."""
    return next(line for line in frame.splitlines() if name[:10] in line)


def test_once_prints_one_frame_of_the_running_runs(
    server: ServerProcess, live_runs: tuple[str, str, int]
) -> None:
    tag, _, _ = live_runs
    done = top_once(server, NO_COLOR="1")
    assert done.returncode == 0, done.stderr
    frame = done.stdout
    print(frame)
    assert "\x1b[" not in frame  # no colour, no cursor moves, in a pipe
    assert all(len(line) <= 80 for line in frame.splitlines())
    assert f"ended-{tag}" not in frame  # running runs only
    starved, fed = _row(frame, f"starved-{tag}"), _row(frame, f"fed-{tag}")
    # Figures from the steps the agents sent: 20 ms steps waiting 12 ms (60 %), 40 ms fed ones;
    # the median step time is the server's, the run page's and the runs list's.
    listed = httpx.get(
        f"{server.url}/api/v1/runs", params={"status": "running"},
        headers={"Authorization": f"Bearer {VIEW}"},
    ).json()["data"]  # fmt: skip
    medians = {
        run["name"]: ms_text(run["summary"]["step_time_ms_median"] / 1000)
        for run in listed
        if run["name"] in (f"starved-{tag}", f"fed-{tag}")
    }
    assert medians[f"starved-{tag}"] in ("20.0 ms", "19.9 ms", "20.1 ms"), medians
    starved_median, fed_median = (re.escape(medians[n]) for n in (f"starved-{tag}", f"fed-{tag}"))
    assert re.search(rf"starved-\S+\s+v-{tag}\s+\d+\s+50\.0\s+{starved_median}\s", starved)
    assert re.search(rf"fed-{tag}\s+s-{tag}\s+\d+\s+25\.0\s+{fed_median}\s", fed), fed
    assert "60.0 %!!" in starved  # highly input-bound, said without colour
    assert "0.0 %" in fed and "!" not in fed
    assert "WAIT 30 S" in frame  # what the figures cover: the last 30 s
    assert re.search(r"\s0\s+35%\s+21%\s+3\.7/15G$", starved), starved  # GPU 0, util, SM, mem
    second = frame.splitlines()[frame.splitlines().index(starved) + 1]
    assert re.fullmatch(r"\s+1\s+33%\s+19%\s+5\.6/15G", second), second  # its GPU 1
    assert re.search(r"\s0\s+97%\s+-\s+3\.7/15G$", fed), fed  # no SM activity: not 0
    first, second = frame.index(f"starved-{tag}"[:10]), frame.index(f"fed-{tag}")
    assert first < second  # sorted by steps/s, fastest first


def test_once_in_colour_paints_the_bar_in_the_verdicts_colour(
    server: ServerProcess, live_runs: tuple[str, str, int]
) -> None:
    tag, _, _ = live_runs
    done = top_once(server, FORCE_COLOR="1", TERM="xterm-256color")
    assert done.returncode == 0, done.stderr
    starved = _row(done.stdout, f"starved-{tag}")
    fed = _row(done.stdout, f"fed-{tag}")
    assert re.search(r"\x1b\[31m█+", starved) and "!!" not in starved  # red says it
    assert re.search(r"\x1b\[32m 0\.0 %", fed)  # green: not input-bound


def test_server_down_and_bad_tokens_are_one_line_and_an_exit_code(
    server: ServerProcess, tmp_path: Path
) -> None:
    nobody = ServerProcess(data_dir=tmp_path, port=free_port())  # never started
    down = top_once(nobody)
    assert down.returncode == 3
    assert down.stderr.count("\n") == 1 and "Traceback" not in down.stderr
    assert f"cannot reach the server at {nobody.url}" in down.stderr

    wrong = top_once(server, STOKER_VIEW_TOKEN="not-the-token")
    assert wrong.returncode == 4
    assert wrong.stderr.count("\n") == 1 and "Traceback" not in wrong.stderr
    assert "refused the token (401" in wrong.stderr and "STOKER_VIEW_TOKEN" in wrong.stderr
    assert top_once(server, "--token", VIEW, STOKER_VIEW_TOKEN="").returncode == 0

    bad_url = top_once(server, "--server", "localhost")
    assert bad_url.returncode == 2 and "is not a URL" in bad_url.stderr


# -- ended runs, and a server without GPUs ------------------------------------------------------

# Names as long as the demo's: with GPU columns beside a status column, 80 columns cut them.
ENDED = (
    ("fed-pipeline-bs256", "stoker-demo", "finished"),
    ("resnet50-augmix", "imagenet", "failed"),
    ("mnist-convnet", "mnist", "interrupted"),
)
GPU_RUN = "bert-finetune-squad"


@pytest.fixture(scope="module")
def ended_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of its own (so that it lists only these runs) with three ended runs and two
    running ones: one without GPU readings (as on a machine without a GPU), one on two GPUs."""
    env = {"STOKER_VIEW_TOKEN": VIEW}
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("top-ended"), env=env).start()
    for name, project, status in ENDED:
        agent = ScriptedAgent(server, name=name, project=project)
        agent.steps(192, dur=0.01, wait=0.0)
        agent.end(status)
        agent.close()
    running = ScriptedAgent(server, name="starved-pipeline", project="stoker-demo")
    running.steps(20, dur=0.05, wait=0.04)
    on_gpus = ScriptedAgent(server, name=GPU_RUN, project="nlp")
    on_gpus.steps(40, dur=0.05, wait=0.004)
    device = {"t": [on_gpus.t, on_gpus.t], "gpu": [0, 1], "util": [91.0, 89.0],
              "sm_util": [64.0, 61.0], "mem_used": [3.1e10, 3.0e10],
              "mem_total": [8e10, 8e10]}  # fmt: skip
    on_gpus.send(device=device)
    yield server
    for agent in (running, on_gpus):
        agent.end("finished")
        agent.close()
    server.stop()


def test_once_at_80_columns_gives_names_the_room_and_status_its_own_column(
    ended_runs: ServerProcess,
) -> None:
    done = top_once(ended_runs, "--all", NO_COLOR="1")
    assert done.returncode == 0, done.stderr
    frame = done.stdout
    (ARTIFACTS / "top-ended-frame.txt").parent.mkdir(exist_ok=True)
    (ARTIFACTS / "top-ended-frame.txt").write_text(frame)
    print(frame)
    lines = frame.rstrip("\n").splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), frame
    header = lines[1]  # no GPU columns: they would cut the names
    assert re.match(r"RUN\s+PROJECT\s+STATUS\s+STEP\s+STEP/S\s+MEDIAN\s+INPUT WAIT\s*$", header)
    rows = [line for line in lines[2:] if not line.lstrip().startswith(("▲", "GPU"))]
    assert rows and "…" not in "".join(rows)  # no name cut: no GPU columns take their room
    for name, project, status in ENDED:
        row = _row(frame, name)
        assert re.match(rf"{re.escape(name)}\s+{project}\s+{status}\s+192\s+-\s", row), row
    running = _row(frame, "starved-pipeline")
    assert re.match(r"starved-pipeline\s+stoker-demo\s+running\s+20\s", running), running
    assert "80.0 %" in running  # 40 ms of 50 waiting
    # GPU columns would leave the names 8 characters here: the GPUs go on a line under their run.
    assert re.match(rf"{GPU_RUN}\s+nlp\s+running\s+40\s", _row(frame, GPU_RUN))
    under = lines[lines.index(_row(frame, GPU_RUN)) + 1]
    assert re.fullmatch(r"\s+GPU 0\s+91% SM\s+64%\s+29/75G\s+GPU 1\s+89% SM\s+61%\s+28/75G", under)
    assert "quit" not in frame and "select" not in frame  # --once reads no keys

    without = top_once(ended_runs, NO_COLOR="1").stdout  # running runs only: no status column
    assert "STATUS" not in without and "finished" not in without
    assert re.match(r"starved-pipeline\s+stoker-demo\s+20\s", _row(without, "starved"))


# -- the interactive view, in a real terminal -------------------------------------------------


class Tmux:
    """A tmux server of the test's own (its own socket), one 80x24 session running `top`."""

    def __init__(self, command: str, env: dict[str, str]) -> None:
        self.socket = f"stoker-top-{uuid.uuid4().hex[:8]}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        self.rc_path = Path(f"/tmp/{self.socket}.rc")
        shell = f"env -i {exports} {command}; echo $? > {self.rc_path}; sleep 600"
        self.run("new-session", "-d", "-x", "80", "-y", "24", "-s", "top", "-c", str(REPO), shell)

    def run(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self, *, escapes: bool = False) -> str:
        return self.run("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "top")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "top", *keys)

    def shows(self, text: str, what: str = "") -> str:
        try:
            return wait_for(lambda: text in (s := self.screen()) and s, what=what or text)
        except AssertionError as error:
            raise AssertionError(f"{error}; the screen:\n{self.screen()}") from None

    def exit_status(self) -> str:
        """`top`'s exit status once it has quit: the shell creates the file before it writes
        the line, so the line is waited for, not the file."""

        def written() -> str:
            text = self.rc_path.read_text() if self.rc_path.exists() else ""
            return text.strip() if text.endswith("\n") else ""

        return wait_for(written, what="top to quit")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        self.rc_path.unlink(missing_ok=True)


@pytest.fixture
def tmux() -> Iterator[list[Tmux]]:
    require(shutil.which("tmux") is not None, "tmux (Debian package tmux)")
    sessions: list[Tmux] = []
    yield sessions
    for session in sessions:
        session.close()


def _top_in_tmux(sessions: list[Tmux], server: ServerProcess, **env: str) -> Tmux:
    command = f"{shlex.quote(sys.executable)} -m trainer_agent.cli top --server {server.url}"
    full = {**_env(**env), "PYTHONPATH": str(REPO), "TERM": "xterm-256color"}
    full.pop("COLUMNS")
    full.pop("LINES")
    session = Tmux(command, full)
    sessions.append(session)
    return session


def test_a_key_lists_the_ended_runs_read_from_the_server(
    ended_runs: ServerProcess, tmux: list[Tmux]
) -> None:
    term = _top_in_tmux(tmux, ended_runs)
    frame = term.shows("starved-pipeline", "the running run")
    assert ENDED[0][0] not in frame and frame.rstrip().splitlines()[-1].startswith("↑↓ select")
    term.keys("a")  # ended runs too: read from the server, not only those that end meanwhile
    frame = term.shows(ENDED[2][0], "the ended runs")
    assert re.search(rf"{ENDED[1][0]}\s+{ENDED[1][1]}\s+failed\s+192\s", frame), frame
    (ARTIFACTS / "top-ended-interactive-frame.txt").write_text(frame)
    term.keys("q")
    term.exit_status()


def test_top_in_an_80x24_terminal_sorts_filters_opens_and_quits(
    server: ServerProcess, live_runs: tuple[str, str, int], tmux: list[Tmux]
) -> None:
    tag, starved_name, _ = live_runs
    rule = httpx.post(
        f"{server.url}/api/v1/alert-rules",
        json={"name": f"hot-{tag}", "metric": "temperature", "comparison": ">",
              "threshold": 50, "scope": "project", "project": f"v-{tag}"},
        headers={"Authorization": f"Bearer {ADMIN}"},  # a rule is the admin's to make
    )  # fmt: skip
    assert rule.status_code == 201, rule.text
    term = _top_in_tmux(tmux, server)
    frame = term.shows(f"fed-{tag}", "both runs on screen")
    assert frame.startswith("stoker top")
    assert re.search(r"\s35%\s+21%\s+3\.7/15G", _row(frame, starved_name))  # one line
    # The alert (scripted GPUs run at 60 °C) fires on the live socket and shows under its run.
    frame = term.shows(f"hot-{tag}", "the firing alert under its run")
    lines = frame.splitlines()
    alert_line = next(i for i, line in enumerate(lines) if f"hot-{tag}" in line)
    assert starved_name in lines[alert_line - 2] and "33%" in lines[alert_line - 1]
    (ARTIFACTS / "top-frame.txt").parent.mkdir(exist_ok=True)
    (ARTIFACTS / "top-frame.txt").write_text(frame)
    coloured = term.screen(escapes=True)
    assert re.search(r"\x1b\[[\d;]*31m█", coloured), "the starved run's bar is red"

    term.keys("s")  # steps/s → step time
    term.shows("sort step time", "the sort key changed")
    # p: all projects, then each in turn; until the starved run's project, where it is alone.
    for _ in range(10):
        if f"project v-{tag}" in term.screen().splitlines()[0]:
            break
        header = term.screen().splitlines()[0]
        term.keys("p")
        wait_for(lambda h=header: term.screen().splitlines()[0] != h, what="the next project")
    filtered = term.shows(f"project v-{tag}", "the starved run's project")
    assert starved_name in filtered and f"fed-{tag}" not in filtered

    term.keys("Enter")  # open the selected run: the starved one, alone in its project
    opened = term.shows("\nstep time ", "the opened run")
    assert opened.splitlines()[0].startswith("stoker top")
    assert starved_name in opened.splitlines()[0]
    assert "highly input-bound" in opened and "advice" in opened
    assert re.search(r"RANK\s+HOST\s+PID\s+STATUS", opened)  # its workers
    assert opened.rstrip().splitlines()[-1] == "esc back  q quit"  # all of it fits in 24 lines
    wait_for(
        lambda: re.search(r"step time\s+20\.0 ms\s+\S{5,}", term.screen()),
        what="the step-time sparkline",
    )
    (ARTIFACTS / "top-run-frame.txt").write_text(term.screen())

    term.keys("Escape")
    term.shows("INPUT WAIT", "back to the list")
    term.keys("q")
    assert term.exit_status() == "0"


def _colours(screen: str) -> set[int]:
    """The SGR colour codes (foreground, background; 39/49 are the defaults) on a screen."""
    codes = {
        int(code)
        for params in re.findall(r"\x1b\[([\d;]*)m", screen)
        for code in params.split(";")
        if code
    }
    return {c for c in codes if (30 <= c <= 48 and c not in (39, 49)) or 90 <= c <= 107}


def test_top_without_colour_in_tmux(
    server: ServerProcess, live_runs: tuple[str, str, int], tmux: list[Tmux]
) -> None:
    tag, _, _ = live_runs
    term = _top_in_tmux(tmux, server, NO_COLOR="1")
    term.shows(f"fed-{tag}")
    coloured = term.screen(escapes=True)
    assert not _colours(coloured)
    assert "!!" in _row(term.screen(), f"starved-{tag}")
    term.keys("q")
    term.exit_status()


def test_many_runs_scroll_in_24_lines(server: ServerProcess, tmux: list[Tmux]) -> None:
    tag = uuid.uuid4().hex[:4]
    agents = [ScriptedAgent(server, name=f"r{i:02d}-{tag}", project=f"m-{tag}") for i in range(30)]
    try:
        for i, agent in enumerate(agents):  # run i steps at (i + 1) steps/s: sorted r29 first
            agent.steps(10, dur=1 / (i + 1), wait=0.0)
        term = _top_in_tmux(tmux, server)
        term.shows(f"r29-{tag}")
        term.keys("-N", "29", "Down")  # to the slowest, the last of the 30
        term.shows(f"r00-{tag}", "the list scrolled to the last run")
        frame = wait_for(
            lambda: f"r29-{tag}" not in (s := term.screen()) and s, what="r29 scrolled off"
        )
        lines = frame.rstrip("\n").splitlines()
        assert len(lines) <= 24 and lines[0].startswith("stoker top")
        assert lines[-1].startswith("↑↓ select")  # the keys line is still there

        def selected() -> list[str]:
            return [line for line in term.screen(escapes=True).splitlines() if "\x1b[7m" in line]

        wait_for(lambda: f"r00-{tag}" in "".join(selected()[:1]), what="r00 highlighted")
        term.keys("q")
        term.exit_status()
    finally:
        for agent in agents:
            agent.end("finished")
            agent.close()


def test_top_says_it_reconnects_when_the_server_restarts(tmp_path: Path, tmux: list[Tmux]) -> None:
    first = ServerProcess(data_dir=tmp_path / "restarting", env={"STOKER_VIEW_TOKEN": VIEW})
    first.start()
    second = ServerProcess(data_dir=first.data_dir, port=first.port, env=first.env)
    try:
        agent = ScriptedAgent(first, name="before", project="p")
        agent.steps(10, dur=0.05, wait=0.0)
        term = _top_in_tmux(tmux, first)
        term.shows("before")
        first.stop()
        term.shows("reconnecting", "the lost connection said")
        second.start()
        wait_for(lambda: "reconnecting" not in term.screen(), what="connected again")
        term.keys("C-c")  # Ctrl-C quits as q does, the terminal restored
        assert term.exit_status() == "0"
        assert "Traceback" not in term.screen()
    finally:
        first.stop()
        second.stop()


# -- a real Keras training ---------------------------------------------------------------------


def test_top_follows_a_real_keras_training(server: ServerProcess, tmux: list[Tmux]) -> None:
    name = f"fit-{uuid.uuid4().hex[:6]}"
    training = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.train_script", "--server", server.url, "--name", name,
         "--project", "keras", "--epochs", "200", "--batches", "20",
         "--batch-delay-s", "0.02"],
        cwd=REPO, env={k: v for k, v in os.environ.items() if k != "STOKER_VIEW_TOKEN"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def stepping() -> str | None:
            done = top_once(server, NO_COLOR="1")
            assert done.returncode == 0, done.stderr
            if name not in done.stdout:
                return None
            row = _row(done.stdout, name)
            cells = re.search(rf"{name}\s+keras\s+([\d,]+)\s+([\d.]+)\s+([\d.]+)\s", row)
            return row if cells and int(cells.group(1).replace(",", "")) > 20 else None

        row = wait_for(stepping, timeout_s=180, interval_s=1, what="the Keras run with steps")
        print(row)
        run = httpx.get(
            f"{server.url}/api/v1/runs", params={"project": "keras"},
            headers={"Authorization": f"Bearer {VIEW}"},
        ).json()["data"][0]  # fmt: skip
        assert run["status"] == "running"
        share = re.search(r"(\d+\.\d) %", row)
        assert share is not None  # the wait the callback measured, as a share
        cells = re.search(rf"{name}\s+keras\s+[\d,]+\s+([\d.]+)\s+([\d.]+)\s", row)
        assert cells is not None
        assert float(cells.group(2)) >= 20.0  # each step waits for a 20 ms sleep in its map

        term = _top_in_tmux(tmux, server)
        term.shows(name)
        while "project keras" not in term.screen().splitlines()[0]:
            header = term.screen().splitlines()[0]
            term.keys("p")
            wait_for(lambda h=header: term.screen().splitlines()[0] != h, what="next project")
        (ARTIFACTS / "top-keras-frame.txt").write_text(term.shows(name))
        term.keys("Enter")
        opened = term.shows("\nverdict ", "the Keras run opened")
        assert name in opened.splitlines()[0]
        assert opened.rstrip().splitlines()[-1] == "esc back  q quit"  # advice cut to fit
        assert re.search(
            rf"\n\s+0 {re.escape(os.uname().nodename[:6])}\S*\s+{training.pid}\s+running", opened
        )
        wait_for(
            lambda: re.search(r"step time\s+[\d.]+ ms\s+\S{20,}", term.screen()), what="sparkline"
        )
        (ARTIFACTS / "top-keras-run-frame.txt").write_text(term.screen())
        term.keys("q")
        term.exit_status()
    finally:
        training.kill()
        training.wait()


# -- the agent-only install --------------------------------------------------------------------

SERVER_ONLY = (
    "stoker_server",
    "fastapi",
    "starlette",
    "sqlmodel",
    "sqlalchemy",
    "pydantic",
    "uvicorn",
)
WITHOUT_SERVER = f"""
import sys
from importlib.abc import MetaPathFinder

class Refuse(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {SERVER_ONLY!r}:
            raise ImportError(f"{{name}} is not in the agent-only install", name=name)
        return None

sys.meta_path.insert(0, Refuse())
from trainer_agent.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_top_needs_only_the_agent_install(
    server: ServerProcess, live_runs: tuple[str, str, int]
) -> None:
    tag, _, _ = live_runs
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_SERVER, "top", "--once", "--server", server.url],
        cwd=REPO, env=_env(NO_COLOR="1"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"starved-{tag}" in done.stdout and f"fed-{tag}" in done.stdout


# -- keys ----------------------------------------------------------------------------------------


def test_keys_from_a_terminal_also_when_a_sequence_is_cut_between_reads() -> None:
    import asyncio
    import pty

    from tests.harness.support import run_coroutine
    from trainer_agent.top.keys import KeyReader, parse_keys

    assert parse_keys("\x1b[A\x1bOBq\r\x1b[6~x") == ["up", "down", "q", "enter", "pagedown", "x"]
    assert parse_keys("\x1bq\x1b[1;5Cp") == ["escape", "q", "p"]  # Esc then q; Ctrl-right unused

    async def read(chunks: list[tuple[str, int]], escape_wait_s: float) -> list[str]:
        """Write each chunk once the keys before it are read (`keys`: how many by then)."""
        main, terminal = pty.openpty()
        queue: asyncio.Queue[str] = asyncio.Queue()
        keys: list[str] = []
        try:
            with KeyReader(queue, asyncio.Event(), fd=terminal, escape_wait_s=escape_wait_s):
                for chunk, expected in chunks:
                    os.write(main, chunk.encode())
                    for _ in range(1000):
                        while not queue.empty():
                            keys.append(queue.get_nowait())
                        if len(keys) >= expected:
                            break
                        await asyncio.sleep(0.01)
        finally:
            os.close(main)
            os.close(terminal)
        return keys

    # "\x1b[" ends the first read: it waits (an hour at most) for the rest, "A".
    cut = [("j\x1b[", 1), ("Aq", 3)]
    assert run_coroutine(read(cut, escape_wait_s=3600)) == ["j", "up", "q"]
    # A lone Esc is the Esc key once nothing follows it.
    assert run_coroutine(read([("\x1b", 1)], escape_wait_s=0.05)) == ["escape"]
