"""Public training scripts, each run plain and under `stoker run`: does Stoker change anything?

The corpus is tests/corpus/manifest.json: each script's repository, commit, path and sha256.
The scripts themselves are public code that this repository does not commit; they live,
byte for byte, in tests/corpus/scripts/ (git-ignored). `--from-git OWNER/NAME=GIT_DIR` places
them from a local git directory of that repository (a clone or a bare snapshot:
`git -C GIT_DIR show COMMIT:PATH`). Every script's sha256 is checked before it runs; a
missing one is named with the repository and commit that hold it, and skipped.

A real `stoker serve` runs on loopback. Each script runs twice in a fresh temporary
directory: plain (`python SCRIPT`), then `stoker run --project corpus-NAME -- python SCRIPT`,
both with tests/corpus/offline on PYTHONPATH (synthetic `load_data` stand-ins, fixed seeds,
and a History recorder: see its sitecustomize.py). Checks per script: the same exit code, no
hang (a run past its timeout is killed and reported as HANG), the same History (same fits,
same metric names, losses equal within 1e-5 relative), one finished run per `fit` with
Keras's batch count (epochs run x steps per epoch), and wall time within noise
(stoker <= 1.5 x plain + 3 s).

Usage: .venv/bin/python -m bench.corpus [--only NAME]... [--ci] [--from-git OWNER/NAME=DIR]...
"""

import argparse
import dataclasses
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from tests.harness.support import ServerProcess, wait_for  # noqa: E402

CORPUS = REPO / "tests" / "corpus"
MANIFEST = CORPUS / "manifest.json"
SCRIPTS = CORPUS / "scripts"
OFFLINE = CORPUS / "offline"
REL_TOL = 1e-5
ABS_TOL = 1e-7
SLOW_RATIO = 1.5
SLOW_MARGIN_S = 3.0
DEFAULT_TIMEOUT_S = 300.0


@dataclasses.dataclass
class Entry:
    name: str
    file: str
    repository: str
    commit: str
    path: str
    sha256: str
    covers: list[str]
    ci: bool = False
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    args: list[str] = dataclasses.field(default_factory=list)
    timeout_s: float = DEFAULT_TIMEOUT_S
    why_not_ci: str = ""

    @property
    def script(self) -> Path:
        return SCRIPTS / self.file

    @property
    def source(self) -> str:
        return f"{self.repository}@{self.commit[:10]}:{self.path}"


@dataclasses.dataclass
class Execution:
    exit_code: int | None  # None: killed at the timeout (HANG)
    wall_s: float
    fits: list[dict[str, Any]]
    output_tail: str


@dataclasses.dataclass
class Outcome:
    entry: Entry
    plain: Execution | None = None
    stoker: Execution | None = None
    runs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    history_problems: list[str] = dataclasses.field(default_factory=list)
    missing: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    return [Entry(**item) for item in json.loads(path.read_text())["scripts"]]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def script_problem(entry: Entry) -> str | None:
    """Why the script cannot run as recorded (missing, or not the recorded bytes), or None."""
    if not entry.script.exists():
        return f"missing ({entry.repository}@{entry.commit[:10]} not placed)"
    digest = sha256(entry.script)
    if digest != entry.sha256:
        return f"{entry.script}: sha256 {digest} is not the manifest's {entry.sha256}"
    return None


def obtain(entry: Entry, git_dirs: dict[str, Path]) -> str | None:
    """Bring the script into tests/corpus/scripts from a local git directory of its
    repository if it is not there; None when it is there with the recorded bytes."""
    if script_problem(entry) is None:
        return None
    git_dir = git_dirs.get(entry.repository)
    if git_dir is not None:
        shown = subprocess.run(
            ["git", "-C", str(git_dir), "show", f"{entry.commit}:{entry.path}"],
            capture_output=True,
        )
        if shown.returncode == 0 and hashlib.sha256(shown.stdout).hexdigest() == entry.sha256:
            SCRIPTS.mkdir(parents=True, exist_ok=True)
            entry.script.write_bytes(shown.stdout)
    return script_problem(entry)


def missing_line(missing: list[Entry]) -> str:
    """One line naming the missing scripts and the command that places them."""
    repos = sorted({entry.repository for entry in missing})
    commits = {
        repo: sorted({entry.commit[:10] for entry in missing if entry.repository == repo})
        for repo in repos
    }
    holding = "; ".join(f"{repo} at {', '.join(commits[repo])}" for repo in repos)
    options = " ".join(f"--from-git {repo}=GIT_DIR" for repo in repos)
    return (
        f"{len(missing)} corpus script(s) missing from {SCRIPTS.relative_to(REPO)}/ "
        f"({', '.join(entry.name for entry in missing)}): place them with "
        f"`.venv/bin/python -m bench.corpus {options}`, each GIT_DIR a git directory of that "
        f"repository holding the pinned commit ({holding}); they are skipped in this run"
    )


def _environment(entry: Entry, history: Path, spool: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TF_USE_LEGACY_KERAS", None)
    paths = [str(OFFLINE), *filter(None, [env.get("PYTHONPATH")])]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(paths),
            "PYTHONHASHSEED": "0",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "STOKER_CORPUS_HISTORY": str(history),
            "STOKER_SPOOL_DIR": str(spool),
            "MPLBACKEND": "Agg",
        }
    )
    env.update(entry.env)
    return env


def execute(entry: Entry, command_prefix: list[str], work: Path) -> Execution:
    """Run the script once in a fresh directory under `work`; kill it at its timeout."""
    cwd = Path(tempfile.mkdtemp(prefix=f"{entry.name}-", dir=work))
    history = cwd.parent / f"{cwd.name}.history.jsonl"
    log = cwd.parent / f"{cwd.name}.log"
    env = _environment(entry, history, cwd.parent / f"{cwd.name}.spool")
    command = [*command_prefix, sys.executable, str(entry.script), *entry.args]
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            exit_code: int | None = process.wait(timeout=entry.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            exit_code = None
    wall_s = time.monotonic() - started
    fits = []
    if history.exists():
        fits = [json.loads(line) for line in history.read_text().splitlines() if line]
    tail = log.read_text(errors="replace")[-3000:]
    return Execution(exit_code=exit_code, wall_s=wall_s, fits=fits, output_tail=tail)


def batch_count(fit: dict[str, Any]) -> int | None:
    """Keras's batch count for one fit: epochs it ran x steps per epoch (None: unknown)."""
    steps = fit.get("steps")
    if steps is None:
        return None
    epochs_run = max((len(v) for v in fit["history"].values() if isinstance(v, list)), default=0)
    return int(epochs_run * steps)


def compare_histories(plain: list[dict[str, Any]], stoker: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    if len(plain) != len(stoker):
        return [f"{len(plain)} fits plain, {len(stoker)} under stoker run"]
    for index, (a, b) in enumerate(zip(plain, stoker, strict=True)):
        if sorted(a["history"]) != sorted(b["history"]):
            names = f"{sorted(a['history'])} vs {sorted(b['history'])}"
            problems.append(f"fit {index}: metrics {names}")
            continue
        for key, values in a["history"].items():
            other = b["history"][key]
            if len(values) != len(other):
                problems.append(f"fit {index}: {key} has {len(values)} vs {len(other)} epochs")
                continue
            for epoch, (x, y) in enumerate(zip(values, other, strict=True)):
                if isinstance(x, float) and isinstance(y, float):
                    same = (math.isnan(x) and math.isnan(y)) or math.isclose(
                        x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL
                    )
                else:
                    same = x == y
                if not same:
                    problems.append(f"fit {index}: {key}[{epoch}] {x!r} plain vs {y!r} stoker")
                    break
        if (a.get("epochs"), a.get("steps")) != (b.get("epochs"), b.get("steps")):
            problems.append(f"fit {index}: params {a.get('epochs')}x{a.get('steps')} vs "
                            f"{b.get('epochs')}x{b.get('steps')}")  # fmt: skip
    return problems


def project(entry: Entry) -> str:
    return f"corpus-{entry.name}"


def stored_runs(server: ServerProcess, entry: Entry, expected: int) -> list[dict[str, Any]]:
    """The project's runs, oldest first, once `expected` of them are no longer running."""

    def settled() -> list[dict[str, Any]] | None:
        runs = server.get("/api/v1/runs", project=project(entry), limit=100)["data"]
        done = [run for run in runs if run["status"] != "running"]
        return runs if len(done) >= expected and len(done) == len(runs) else None

    try:
        runs = wait_for(settled, timeout_s=20, interval_s=0.25, what="runs to settle") or []
    except AssertionError:
        runs = server.get("/api/v1/runs", project=project(entry), limit=100)["data"]
    return sorted(runs, key=lambda run: run["id"])


def check(entry: Entry, server: ServerProcess, work: Path) -> Outcome:
    outcome = Outcome(entry)
    problem = script_problem(entry)
    if problem:
        outcome.problems.append(problem)
        outcome.missing = not entry.script.exists()
        return outcome
    plain = outcome.plain = execute(entry, [], work)
    stoker_prefix = [
        sys.executable, "-m", "trainer_agent.cli", "run", "--server", server.url,
        "--project", project(entry), "--name", entry.name, "--",
    ]  # fmt: skip
    stoker = outcome.stoker = execute(entry, stoker_prefix, work)
    problems = outcome.problems
    for label, execution in (("plain", plain), ("stoker", stoker)):
        if execution.exit_code is None:
            problems.append(f"HANG {label}: still running after {entry.timeout_s:.0f} s")
    if plain.exit_code != stoker.exit_code:
        problems.append(f"exit code {plain.exit_code} plain, {stoker.exit_code} under stoker run")
    outcome.history_problems = compare_histories(plain.fits, stoker.fits)
    problems.extend(outcome.history_problems)
    outcome.runs = stored_runs(server, entry, expected=len(stoker.fits))
    if len(outcome.runs) != len(stoker.fits):
        problems.append(f"{len(outcome.runs)} runs stored for {len(stoker.fits)} fits")
    for index, (run, fit) in enumerate(zip(outcome.runs, stoker.fits, strict=False)):
        steps = (run.get("summary") or {}).get("steps")
        expected = batch_count(fit)
        if expected is not None and steps != expected:
            problems.append(f"run {index}: {steps} steps stored, Keras ran {expected} batches")
        if run["status"] != "finished":
            problems.append(f"run {index}: status {run['status']}")
    if slow(plain.wall_s, stoker.wall_s):
        problems.append(f"slow: {stoker.wall_s:.1f} s under stoker run vs {plain.wall_s:.1f} s")
    return outcome


def slow(plain_s: float, stoker_s: float) -> bool:
    return stoker_s > SLOW_RATIO * plain_s + SLOW_MARGIN_S


def _code(execution: Execution | None) -> str:
    if execution is None:
        return "-"
    return "HANG" if execution.exit_code is None else str(execution.exit_code)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(outcomes: list[Outcome]) -> str:
    """The Markdown table of tests/corpus/README.md, one row per script."""
    header = ("script", "source", "covers", "exit plain/stoker",
              "wall s plain/stoker (ratio)", "runs stored/fits",
              "steps stored (Keras batches)", "status", "same History", "verdict")  # fmt: skip
    rows = [header, tuple("---" for _ in header)]
    for o in outcomes:
        plain, stoker = o.plain, o.stoker
        wall = "-"
        if plain and stoker:
            wall = f"{plain.wall_s:.1f}/{stoker.wall_s:.1f} ({stoker.wall_s / plain.wall_s:.2f})"
        fits = stoker.fits if stoker else []
        steps = ", ".join(
            f"{(run.get('summary') or {}).get('steps')}"
            f" ({batch_count(fit) if fit is not None else '-'})"
            for run, fit in zip(o.runs, [*fits, *[None] * len(o.runs)], strict=False)
        )
        statuses = ",".join(sorted({run["status"] for run in o.runs})) or "-"
        if o.missing:
            verdict, history, runs = "missing (not placed)", "-", "-"
        else:
            verdict = "same" if o.ok else "DIFFERS: " + "; ".join(o.problems)
            history = "yes" if plain and stoker and not o.history_problems else "no"
            if plain and stoker and not plain.fits:
                history = "yes (no fit)" if not o.history_problems else history
            runs = f"{len(o.runs)}/{len(fits)}" if stoker else "-"
        codes = f"{_code(plain)}/{_code(stoker)}"
        covers = "; ".join(o.entry.covers)
        rows.append((o.entry.name, f"`{o.entry.source}`", covers, codes, wall, runs,
                     steps or "-", statuses, history, verdict))  # fmt: skip
    return "\n".join("| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows)


def start_server(work: Path) -> ServerProcess:
    return ServerProcess(data_dir=work / "server").start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="a script name; repeatable")
    parser.add_argument("--ci", action="store_true", help="only the scripts marked ci")
    parser.add_argument(
        "--from-git", action="append", default=[], metavar="OWNER/NAME=GIT_DIR",
        help="place missing scripts of OWNER/NAME from this git directory; repeatable",
    )  # fmt: skip
    parser.add_argument("--table", type=Path, help="also write the Markdown table to this file")
    options = parser.parse_args(argv)
    entries = load_manifest()
    if options.only:
        unknown = set(options.only) - {entry.name for entry in entries}
        if unknown:
            parser.error(f"unknown script(s): {', '.join(sorted(unknown))}")
        entries = [entry for entry in entries if entry.name in options.only]
    if options.ci:
        entries = [entry for entry in entries if entry.ci]
    git_dirs = {
        repo: Path(path) for repo, _, path in (item.partition("=") for item in options.from_git)
    }
    missing: list[Entry] = []
    for entry in entries:
        problem = obtain(entry, git_dirs)
        if problem and not entry.script.exists():
            missing.append(entry)
        elif problem:
            print(f"{entry.name}: {problem}", file=sys.stderr)
    if missing:
        print(missing_line(missing), file=sys.stderr, flush=True)
    if len(missing) == len(entries):
        return 2
    work = Path(tempfile.mkdtemp(prefix="stoker-corpus-"))
    server = start_server(work)
    outcomes: list[Outcome] = []
    started = time.monotonic()
    try:
        for entry in entries:
            outcome = check(entry, server, work)
            outcomes.append(outcome)
            print(f"{entry.name}: {'same' if outcome.ok else '; '.join(outcome.problems)}",
                  flush=True)  # fmt: skip
    finally:
        server.stop()
    elapsed = time.monotonic() - started
    rendered = table(outcomes)
    print()
    print(rendered)
    ran = [o for o in outcomes if not o.missing]
    same = sum(o.ok for o in ran)
    summary = (f"{same} of {len(ran)} scripts run behave the same under stoker run "
               f"({len(missing)} missing; {elapsed:.0f} s in all; logs under {work})")  # fmt: skip
    print(f"\n{summary}")
    if options.table:
        options.table.parent.mkdir(parents=True, exist_ok=True)
        options.table.write_text(rendered + "\n\n" + summary + "\n")
    return 0 if same == len(ran) and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
