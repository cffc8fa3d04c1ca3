"""Bad configuration gets a clear, immediate message naming the value and the fix, never
"cannot reach the server".

Each promise is about a process, so each test runs one: `stoker run`/`stoker upload` with a
server that is not a URL, a real agent (tests/harness/loop_script.py, `Monitor`) against a real
plain HTTP server on loopback that is not Stoker, a real agent whose server is down and whose
printed `stoker upload` line is then run as printed, and `stoker serve` on a data directory it
cannot use (under a regular file; on a read-only tmpfs, which refuses root too) or on a port
in use.
"""

import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness.support import REPO, ServerProcess, free_port
from trainer_agent.config import AgentConfig, RunOptions, check_server

STOKER = [sys.executable, "-m", "stoker_server.cli"]
UNREACHABLE_WORDS = ("cannot reach", "unreachable", "when it is back")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STOKER_SERVER"}
    return {**env, "STOKER_CLOSE_TIMEOUT_S": "2", **extra}


def _loop(
    server: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A real training process: a custom loop reporting through `Monitor(server=server)`."""
    return subprocess.run(
        [sys.executable, "-m", "tests.harness.loop_script", "--server", server, "--steps", "20",
         "--step-s", "0.01", *args],
        cwd=REPO, env=env or _env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _upload_command(stderr: str) -> str:
    """The `stoker upload ...` line the agent printed, exactly as a user would copy it."""
    (line,) = [line for line in stderr.splitlines() if line.strip().startswith("stoker upload ")]
    return line.strip()


# --- the value is checked where it is given ------------------------------------------------
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("htp://127.0.0.1:8470", "is not a URL (its scheme 'htp://' is not http:// or https://): "
         "write http://127.0.0.1:8470"),
        ("http//gpu-box:8470", "is not a URL (no http:// or https:// and no port): "
         "write http://gpu-box:8470"),
        ("gpu-box", "is not a URL (no http:// or https:// and no port): write http://gpu-box:8470"),
        ("http://gpu-box:84x0", "is not a URL (its port '84x0' is not a number from 1 to 65535)"),
        ("http://", "is not a URL (it names no host)"),
    ],
)  # fmt: skip
def test_a_value_that_is_not_a_url_is_named_with_its_fix(value: str, message: str) -> None:
    setting = check_server(value, "STOKER_SERVER")
    assert setting.problem == f"STOKER_SERVER={value!r} {message}" or (
        setting.problem is not None
        and setting.problem.startswith(f"STOKER_SERVER={value!r} {message}")
    ), setting.problem


def test_host_and_port_without_a_scheme_is_read_as_http() -> None:
    setting = check_server("127.0.0.1:8470", "STOKER_SERVER")
    assert setting.url == "http://127.0.0.1:8470" and setting.problem is None
    assert setting.notice == (
        "STOKER_SERVER='127.0.0.1:8470' has no scheme; using http://127.0.0.1:8470 "
        "(write http://127.0.0.1:8470 to silence this)"
    )
    assert check_server("https://stoker.example.com/sub/", "server=").url == (
        "https://stoker.example.com/sub"
    )


def test_the_callback_argument_is_said_once_per_process_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = RunOptions(run_name="r", project="p", server="htp://unit-test-host:1")
    with caplog.at_level("WARNING", logger="trainer_agent"):
        for _ in range(3):  # autolog makes a callback for every fit
            config = AgentConfig.from_options(options)
    assert config.server_problem is not None
    said = [r.getMessage() for r in caplog.records if "unit-test-host" in r.getMessage()]
    assert said == [
        "Stoker: server='htp://unit-test-host:1' is not a URL (its scheme 'htp://' is not "
        "http:// or https://): write http://unit-test-host:1. Until then this process sends "
        "nothing to a server: training runs as usual, its runs are kept in the spool for "
        "`stoker upload`"
    ]


# --- the command line ----------------------------------------------------------------------
def test_stoker_run_refuses_a_server_that_is_not_a_url_before_running_anything() -> None:
    script = [sys.executable, "-c", "print('the script ran')"]
    result = subprocess.run(
        [*STOKER, "run", "--server", "htp://127.0.0.1:8470", "--", *script],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result
    assert "the script ran" not in result.stdout
    assert result.stderr == (
        "stoker run: --server 'htp://127.0.0.1:8470' is not a URL (its scheme 'htp://' is not "
        "http:// or https://): write http://127.0.0.1:8470\n"
    )
    # The same from STOKER_SERVER, and for `stoker upload`.
    result = subprocess.run(
        [*STOKER, "upload", str(REPO)],
        cwd=REPO, env=_env(STOKER_SERVER="gpu-box"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        "stoker upload: STOKER_SERVER='gpu-box' is not a URL (no http:// or https:// and no "
        "port): write http://gpu-box:8470\n"
    )


def test_stoker_run_reads_host_port_as_http_and_says_so_once() -> None:
    script = [sys.executable, "-c", "import os; print(os.environ['STOKER_SERVER'])"]
    result = subprocess.run(
        [*STOKER, "run", "--", *script],
        cwd=REPO, env=_env(STOKER_SERVER="127.0.0.1:8470"), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "http://127.0.0.1:8470"  # the script's agents get the URL
    assert result.stderr == (
        "stoker run: STOKER_SERVER='127.0.0.1:8470' has no scheme; using http://127.0.0.1:8470 "
        "(write http://127.0.0.1:8470 to silence this)\n"
    )


# --- a real agent --------------------------------------------------------------------------
def test_an_agent_with_host_port_and_no_scheme_delivers_to_the_server(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        bare = server.url.removeprefix("http://")
        result = _loop("", env=_env(STOKER_SERVER=bare))  # `--server ""`: STOKER_SERVER
        assert result.returncode == 0, result.stderr
        assert not any(word in result.stderr for word in UNREACHABLE_WORDS), result.stderr
        assert result.stderr.count(f"STOKER_SERVER={bare!r} has no scheme; using {server.url}") == 1
        (run,) = server.get("/api/v1/runs")["data"]
        assert run["status"] == "finished" and run["summary"]["steps"] == 20
    finally:
        server.stop()


def test_an_agent_whose_server_is_not_a_url_trains_says_so_once_and_keeps_the_run(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    result = _loop("", env=_env(STOKER_SERVER="htp://127.0.0.1:8470"))
    assert result.returncode == 0, result.stderr
    assert "trained 20" in result.stdout
    assert not any(word in result.stderr for word in UNREACHABLE_WORDS), result.stderr
    assert (
        result.stderr.count("STOKER_SERVER='htp://127.0.0.1:8470' is not a URL") == 2
    )  # start, end
    assert (
        "Stoker: STOKER_SERVER='htp://127.0.0.1:8470' is not a URL (its scheme 'htp://' is not "
        "http:// or https://): write http://127.0.0.1:8470. Until then this process sends "
        "nothing to a server: training runs as usual, its runs are kept in the spool for "
        "`stoker upload`\n"
    ) in result.stderr, result.stderr
    # What it kept is sent, as printed, once the setting names the server.
    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        _run_as_printed(_upload_command(result.stderr), server.url)
        (run,) = server.get("/api/v1/runs")["data"]
        assert run["status"] == "finished" and run["summary"]["steps"] == 20
    finally:
        server.stop()


class _NotStoker(http.server.BaseHTTPRequestHandler):
    """A plain web server: an HTML page at `/` and 404 elsewhere; POST is not implemented
    (501), as in `python -m http.server`."""

    html_everywhere = False

    def do_GET(self) -> None:
        found = self.path == "/" or self.html_everywhere
        body = b"<!doctype html><title>Some other app</title><p>hello</p>"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if not self.html_everywhere:
            self.send_error(501, "Unsupported method ('POST')")
            return
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(params=["404-and-501", "html-everywhere"])
def not_stoker(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A plain HTTP server on loopback, and how the agent must describe its answer."""
    everywhere = request.param == "html-everywhere"
    handler = type("Handler", (_NotStoker,), {"html_everywhere": everywhere})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    answer = (
        "HTTP 200 OK, text/html"
        if everywhere
        else "HTTP 501 Unsupported method ('POST'), text/html"
    )
    yield f"http://127.0.0.1:{server.server_address[1]}", answer
    server.shutdown()
    server.server_close()


def test_an_agent_names_a_url_that_answers_but_is_not_stoker(not_stoker: tuple[str, str]) -> None:
    url, answer = not_stoker
    result = _loop(url, "--step-s", "0.1")  # 2 s of training: said while it trains
    assert result.returncode == 0, result.stderr
    assert "trained 20" in result.stdout
    assert not any(word in result.stderr for word in UNREACHABLE_WORDS), result.stderr
    assert "refused the WebSocket upgrade" not in result.stderr  # no misleading fallback note
    said = f"Stoker: {url} answers but is not a Stoker server (POST /api/v1/ingest: {answer}): "
    assert (
        said + "set server= to the URL `stoker serve` prints. Training continues; records are "
        "kept in the spool until this is fixed\n"
    ) in result.stderr, result.stderr
    assert result.stderr.count(said) == 1
    # At exit: the same reason, and where the run is kept.
    assert f"this run's records were not sent: {url} answers but is not a Stoker server (" in (
        result.stderr
    )
    _upload_command(result.stderr)


# --- the path the end of a run prints -----------------------------------------------------
def _run_as_printed(command: str, server_url: str) -> None:
    """Run the printed `stoker upload` line through a shell, as a user pasting it would."""
    env = _env(STOKER_SERVER=server_url)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    assert shutil.which("stoker", path=env["PATH"]), "the `stoker` script is not installed"
    upload = subprocess.run(
        ["sh", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert upload.returncode == 0, (command, upload.stdout, upload.stderr)


def test_the_spool_path_printed_at_exit_is_taken_by_stoker_upload_as_printed(
    tmp_path: Path,
) -> None:
    spool = tmp_path / "agent spool"  # a space: the printed path must survive a shell too
    server = ServerProcess(data_dir=tmp_path / "server")  # not started: the server is down
    result = _loop(server.url, env=_env(STOKER_SPOOL_DIR=str(spool)))
    assert result.returncode == 0, result.stderr
    command = _upload_command(result.stderr)
    assert not command.endswith((".", ",", ";", ":")), command
    server.start()
    try:
        _run_as_printed(command, server.url)
        (run,) = server.get("/api/v1/runs")["data"]
        assert run["status"] == "finished" and run["summary"]["steps"] == 20
        assert not [p for p in spool.iterdir() if p.is_dir()]  # uploaded, so removed
    finally:
        server.stop()


# --- the server --------------------------------------------------------------------------
def _serve(data_dir: Path, port: int, *wrapper: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*wrapper, *STOKER, "serve", "--port", str(port), "--data-dir", str(data_dir)],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_serve_names_a_data_directory_it_cannot_create(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a regular file: nothing can be created under it, not even by root")
    data_dir = blocker / "data"
    result = _serve(data_dir, free_port())
    assert result.returncode == 1
    assert result.stdout == ""  # no URL: it never served
    assert result.stderr == (
        f"stoker serve: cannot create the data directory {data_dir} (Not a directory); "
        "set --data-dir or STOKER_DATA_DIR to a writable directory\n"
    )


def _read_only_mount() -> list[str] | None:
    """A wrapper that mounts a read-only tmpfs on $0 in a private mount namespace, then runs
    the command; None where no mount can be made (needs root or user namespaces). A
    read-only file system refuses writes to root too, unlike mode bits."""
    if shutil.which("unshare") is None:
        return None
    script = 'mount -t tmpfs -o ro,size=64k tmpfs "$0" || exit 97; exec "$@"'
    for unshare in (["unshare", "-m"], ["unshare", "-rm"]):
        if unshare == ["unshare", "-m"] and os.geteuid() != 0:
            continue
        probe = subprocess.run([*unshare, "sh", "-c", script, "/mnt", "true"], capture_output=True)
        if probe.returncode == 0:
            return [*unshare, "sh", "-c", script]
    return None


def test_serve_names_a_read_only_data_directory(tmp_path: Path) -> None:
    wrapper = _read_only_mount()
    if wrapper is None:
        pytest.skip("cannot mount a read-only tmpfs here (needs root or user namespaces)")
    data_dir = tmp_path / "read-only"
    data_dir.mkdir()
    result = _serve(data_dir, free_port(), *wrapper, str(data_dir))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"stoker serve: cannot write in the data directory {data_dir} (Read-only file system); "
        "set --data-dir or STOKER_DATA_DIR to a writable directory\n"
    )


def test_serve_names_a_port_in_use_and_prints_its_url_only_once_listening(
    tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(tmp_path / "data", port)
    assert result.returncode == 1
    assert result.stdout == ""  # never the URL of a server that is not there
    assert (
        result.stderr
        == f"stoker serve: cannot listen on 127.0.0.1:{port} (Address already in use)\n"
    )

    # Started for real: the URL line comes once the server answers there, not before.
    port = free_port()
    process = subprocess.Popen(
        [*STOKER, "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == f"Stoker UI: http://127.0.0.1:{port}/\n"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_an_agent_with_a_token_the_server_refuses_is_told_so(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", env={"STOKER_AGENT_TOKEN": "right"})
    server.start()
    try:
        result = _loop(server.url, env=_env(STOKER_AGENT_TOKEN="wrong"))
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    assert not any(word in result.stderr for word in UNREACHABLE_WORDS), result.stderr
    # Said when the agent first meets the refusal, and again with the upload command at the
    # end; a run that ends before its first flush (as this one may) meets it only there.
    assert f"the Stoker server at {server.url} refuses the agent token" in result.stderr
    assert "set STOKER_AGENT_TOKEN (or token=) to the server's agent token" in result.stderr
    _upload_command(result.stderr)
