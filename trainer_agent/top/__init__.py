"""`stoker top`: a live terminal view of the server's running runs, in the manner of htop.

It follows the browsers' live socket (runs, verdicts, alerts as they change) and reads each
running run's latest steps, GPU readings and verdict over REST every `POLL_S`. Drawn with
Rich (`rich.live.Live`); keys are read in cbreak mode (keys.py). `--once` prints one frame;
`--run ID` opens a run, running or ended, as Enter does.
"""

import asyncio
import contextlib
import itertools
import signal
import sys

from rich.console import Console
from rich.live import Live
from websockets.asyncio.client import ClientConnection

from trainer_agent.settings import agent_setting
from trainer_agent.top.link import EXIT_REFUSED, ServerLink, TopError, read_messages
from trainer_agent.top.state import TopState
from trainer_agent.top.view import Screen, render

POLL_S = 2.0
# Verdicts change rarely and come on the live socket when they do; their window's figure is
# read every VERDICT_EVERY polls (the opened run's at every poll).
VERDICT_EVERY = 3
RECONNECT_S = 2.0
FRAME_S = 0.2  # at most five frames a second


def _console() -> Console:
    # Rich honours NO_COLOR and writes no colour to a pipe.
    return Console(highlight=False, soft_wrap=False)


def _screen(console: Console, *, interactive: bool = True) -> Screen:
    unicode = console.encoding.lower().replace("-", "").startswith("utf")
    return Screen(
        width=console.size.width, height=console.size.height,
        color=console.color_system is not None and not console.no_color, unicode=unicode,
        interactive=interactive,
    )  # fmt: skip


def main(
    *,
    server: str,
    token: str | None,
    once: bool,
    show_ended: bool = False,
    run_id: int | None = None,
) -> int:
    # The viewer token reads; an admin's own token reads too.
    token = token or agent_setting("view_token") or agent_setting("admin_token")
    console = _console()
    if not once:
        try:
            import trainer_agent.top.keys  # noqa: F401
        except ImportError:  # no termios (Windows)
            print("stoker top: needs a POSIX terminal; `--once` prints one frame", file=sys.stderr)
            return 2
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            print("stoker top: needs a terminal; `--once` prints one frame", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_top(server, token, once, console, show_ended, run_id))
    except TopError as error:
        print(f"stoker top: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 0


async def _top(
    server: str,
    token: str | None,
    once: bool,
    console: Console,
    show_ended: bool,
    run_id: int | None = None,
) -> int:
    link = ServerLink(server, token)
    try:
        socket = await link.open_live()  # says at once whether the server and token are good
        state = TopState(connected=True, show_ended=show_ended)
        await link.snapshot(state)
        if run_id is not None:
            await link.open_run(state, run_id)
        await link.poll(state)
        if once:
            await socket.close()
            console.print(render(state, server, _screen(console, interactive=False)))
            return 0
        return await _interactive(link, socket, state, console)
    finally:
        await link.close()


async def _interactive(
    link: ServerLink, socket: ClientConnection, state: TopState, console: Console
) -> int:
    from trainer_agent.top.keys import KeyReader

    changed = asyncio.Event()
    keys: asyncio.Queue[str] = asyncio.Queue()
    failure: list[TopError] = []

    async def follow() -> None:
        nonlocal socket
        while True:
            # A broken connection is said on screen, then made again.
            with contextlib.suppress(Exception):
                await read_messages(socket, state, changed)
            state.connected = False
            changed.set()
            while not state.connected:
                await asyncio.sleep(RECONNECT_S)
                try:
                    socket = await link.open_live()
                    await link.snapshot(state)
                    state.connected = True
                except TopError as error:
                    if error.code == EXIT_REFUSED:
                        failure.append(error)
                        changed.set()
                        return
            changed.set()

    async def poll() -> None:
        for count in itertools.count(1):
            try:
                await link.poll(state, verdicts=count % VERDICT_EVERY == 0)
                state.problem = ""
            except Exception as error:  # said on screen; the next poll tries again
                state.problem = f"reading the runs failed: {error}"
            changed.set()
            await asyncio.sleep(POLL_S / 2 if state.opened is not None else POLL_S)

    tasks = [asyncio.create_task(follow(), name="top-live"), asyncio.create_task(poll())]
    with contextlib.suppress(NotImplementedError, AttributeError):  # a resized terminal
        asyncio.get_running_loop().add_signal_handler(signal.SIGWINCH, changed.set)
    try:
        with (
            KeyReader(keys, changed),
            Live(console=console, screen=True, auto_refresh=False, transient=True) as live,
        ):
            while not failure:
                live.update(render(state, link.server, _screen(console)), refresh=True)
                await _wait(changed)
                while not keys.empty():
                    if _handle(keys.get_nowait(), state) == "quit":
                        return 0
                await asyncio.sleep(FRAME_S)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await socket.close()
    raise failure[0]


async def _wait(changed: asyncio.Event) -> None:
    """Until something changed or a key came, at most POLL_S."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(changed.wait(), POLL_S)
    changed.clear()


def _handle(key: str, state: TopState) -> str | None:
    if key in ("q", "Q"):
        return "quit"
    if state.opened is not None:
        if key in ("escape", "backspace", "left", "b"):
            state.opened = None
        return None
    if key in ("down", "j"):
        state.move(1)
    elif key in ("up", "k"):
        state.move(-1)
    elif key == "pagedown":
        state.move(10)
    elif key == "pageup":
        state.move(-10)
    elif key in ("enter", "right", "o"):
        state.open_selected()
    elif key == "s":
        state.next_sort()
    elif key == "r":
        state.descending = not state.descending
    elif key == "p":
        state.next_project()
    elif key == "a":
        state.show_ended = not state.show_ended
    return None
