"""Drawing `stoker top` with Rich: the runs list and one opened run, fitted to the terminal
(80x24 is enough). Colour is extra, never the only signal: without it (NO_COLOR, a pipe) the
verdict is still written."""

import io
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from trainer_agent.figures import count_text, ms_text, percent_text, share_text
from trainer_agent.top.state import VERDICT_STYLES, GpuReading, RunView, TopState

KEYS_LIST = "↑↓ select  enter open  s sort  r reverse  p project  a ended  q quit"
KEYS_RUN = "esc back  q quit"
SPARKS = "▁▂▃▄▅▆▇█"
SPARKS_ASCII = "_.-:=+*#"
# In monochrome, after the input-wait figure: how input-bound the steps are.
VERDICT_MARKS = {"highly_input_bound": "!!", "moderately_input_bound": "!"}


@dataclass(frozen=True)
class Screen:
    width: int
    height: int
    color: bool
    unicode: bool
    # The selected run is highlighted and the keys are listed; not in `--once`, which reads none.
    interactive: bool = True


def _gib(value: float | None) -> str:
    if value is None:
        return "-"
    gib = value / 2**30
    return f"{gib:.1f}" if gib < 10 else f"{gib:.0f}"


def _memory(gpu: GpuReading) -> str:
    if gpu.mem_used is None:
        return "-"
    return f"{_gib(gpu.mem_used)}/{_gib(gpu.mem_total)}G"


def _percent(value: float | None) -> str:
    """A GPU reading in percent, rounded as everywhere ("35 %", figures.percent_text) but with
    its sign close ("35%", "100%"): the GPU columns are 4 wide so that names keep 80 columns."""
    return "-" if value is None else percent_text(value).replace(" ", "")


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if value < 1000 else f"{value:.0f}"


def _ms(milliseconds: float | None) -> str:
    return "-" if milliseconds is None else ms_text(milliseconds / 1000)


def _count(steps: int) -> str:
    """A step count as everywhere ("2,070"), shortened past what the column holds."""
    if steps < 100_000:
        return count_text(steps)
    return f"{steps / 1e3:.0f}k" if steps < 1_000_000 else f"{steps / 1e6:.1f}M"


def _dash(screen: Screen) -> str:
    return "-"


def wait_cell(view: RunView, screen: Screen, bar_width: int = 4) -> Text:
    """The input-wait share as a bar and a figure, in the verdict's colour."""
    share, verdict = view.wait_share, view.verdict or ""
    style = VERDICT_STYLES.get(verdict, "") if screen.color else ""
    if share is None:
        return Text(" " * bar_width + " " + _dash(screen))
    filled = round(max(0.0, min(1.0, share)) * bar_width)
    if share > 0 and filled == 0 and bar_width > 0:
        filled = 1
    full, empty = ("█", "░") if screen.unicode else ("#", ".")
    cell = Text(full * filled, style=style)
    cell.append(empty * (bar_width - filled), style="bright_black" if screen.color else "")
    cell.append(f"{' ' if bar_width else ''}{share_text(share)}", style=style)
    if not screen.color:
        cell.append(VERDICT_MARKS.get(verdict, ""))
    return cell


def sparkline(values: list[float], width: int, screen: Screen, top: float | None = None) -> str:
    """The last `width` values as bars from 0 to `top` (default: their maximum)."""
    chars = SPARKS if screen.unicode else SPARKS_ASCII
    values = values[-width:]
    if not values:
        return ""
    high = top if top is not None else max(values)
    if high <= 0:
        return chars[0] * len(values)
    steps = len(chars) - 1
    return "".join(chars[min(steps, int(v / high * steps + 0.5))] for v in values)


def _header(state: TopState, server: str, screen: Screen, title: str) -> Text:
    dot = " · " if screen.unicode else " | "
    host = server.split("://", 1)[-1]
    line = Text("stoker top", style="bold" if screen.color else "")
    if not state.connected:  # first, so that it is never cut off
        line.append(
            dot + ("reconnecting…" if screen.unicode else "reconnecting..."),
            style="red" if screen.color else "",
        )
    if host:
        line.append(dot + host)
    line.append(dot + title)
    line.truncate(screen.width, overflow="ellipsis")
    return line


def _gpu_cells(gpu: GpuReading | None, screen: Screen) -> list[Text]:
    if gpu is None:
        return [Text(_dash(screen)), Text(""), Text(""), Text("")]
    label = str(gpu.gpu) if gpu.rank == 0 else f"{gpu.rank}/{gpu.gpu}"
    return [Text(label), Text(_percent(gpu.util)), Text(_percent(gpu.sm_util)), Text(_memory(gpu))]


# The runs list's columns of fixed width: (header, width, right-aligned).
# "MEDIAN": the run's median step time; the input wait's heading names its window (ListLayout).
FIGURE_COLUMNS = (("STEP", 6, True), ("STEP/S", 6, True), ("MEDIAN", 7, True),
                  ("INPUT WAIT", 13, False))  # fmt: skip
GPU_COLUMNS = (("GPU", 3, True), ("UTIL", 4, True), ("SM", 4, True), ("MEM", 8, True))
NAME_MIN, PROJECT_MIN = len("RUN"), len("PROJECT")
# GPU readings go in columns of the run's line only while that leaves the names this much (or
# all they need); else each run's GPUs get a line of their own under it.
NAMES_BESIDE_GPUS = 30


def wait_heading(views: list[RunView]) -> str:
    """The input-wait column's heading, naming what its figures cover when they all cover the
    same ("WAIT 30 S": the last 30 s, "WAIT RUN": the whole run); each run's own is in its
    detail view."""
    windows = {v.wait_window.removesuffix(" so far") for v in views if v.wait_share is not None}
    if len(windows) != 1:
        return "INPUT WAIT"
    return f"WAIT {windows.pop().removeprefix('last ').removeprefix('whole ')}".upper()


@dataclass(frozen=True)
class ListLayout:
    """The runs list's columns for the runs shown: a status column only when some has ended, GPU
    readings only when some has them (in columns, or on lines under each run when columns
    would leave the names too little), and the rest of the width to the names."""

    name_width: int
    project_width: int
    status_width: int  # 0: no status column
    gpus: bool  # GPU columns
    gpu_lines: bool = False  # each run's GPUs on a line of their own under it
    wait_heading: str = "INPUT WAIT"  # names the figures' window where they share one

    @classmethod
    def of(cls, shown: list[RunView], width: int) -> "ListLayout":
        readings = any(view.gpus for view in shown)
        ended = any(view.status != "running" for view in shown)
        status = max([len("STATUS"), *(len(view.status) for view in shown)]) if ended else 0
        longest_name = max([NAME_MIN, *(len(view.name) for view in shown)])
        longest_project = max([PROJECT_MIN, *(len(view.project) for view in shown)])
        needed = longest_name + longest_project

        def free_for_names(gpus: bool) -> int:
            fixed = [width for _, width, _ in FIGURE_COLUMNS]
            fixed += [width for _, width, _ in GPU_COLUMNS] if gpus else []
            fixed += [status] if status else []
            gaps = len(fixed) + 1  # one space after every column but the last
            return max(NAME_MIN + PROJECT_MIN, width - sum(fixed) - gaps)

        gpus = readings and free_for_names(True) >= min(needed, NAMES_BESIDE_GPUS)
        free = free_for_names(gpus)
        # The project takes up to a third of what is free, the name the rest; what the name
        # does not need goes back to the project.
        project = min(longest_project, max(PROJECT_MIN, free // 3))
        name = min(longest_name, free - project)
        project = min(longest_project, free - name)
        return cls(
            name_width=name, project_width=project, status_width=status, gpus=gpus,
            gpu_lines=readings and not gpus, wait_heading=wait_heading(shown),
        )  # fmt: skip

    def leading(self) -> int:
        """Columns before the GPU columns."""
        return 2 + bool(self.status_width) + len(FIGURE_COLUMNS)


def _run_rows(
    state: TopState, view: RunView, screen: Screen, layout: ListLayout
) -> list[list[Text]]:
    """A run's lines: the run with its first GPU, then one per further GPU, then its alerts."""
    gpus = [view.gpus[key] for key in sorted(view.gpus)]
    first = [Text(view.name), Text(view.project)]
    if layout.status_width:
        first.append(Text(view.status))
    first += [
        Text(_count(view.step)),
        Text(_number(view.steps_per_s)),
        Text("-" if view.step_time_s is None else ms_text(view.step_time_s)),
        wait_cell(view, screen),
    ]
    if layout.gpus:
        first += _gpu_cells(gpus[0] if gpus else None, screen)
    rows = [first]
    if layout.gpus:
        rows += [[Text("")] * layout.leading() + _gpu_cells(gpu, screen) for gpu in gpus[1:]]
    if layout.gpu_lines:
        rows += [[line] for line in _gpu_lines(gpus, screen)]
    for alert in state.alerts_of(view.id):
        mark = "▲ " if screen.unicode else "^ "
        line = Text(f"  {mark}{alert.get('message') or alert.get('rule_name', 'alert')}")
        line.stylize("red" if screen.color else "")
        rows.append([line])
    return rows


def _gpu_lines(gpus: list[GpuReading], screen: Screen) -> list[Text]:
    """A run's GPUs as lines under it, as many to a line as fit: "GPU 0  91% SM 64% 29/80G"."""
    parts = []
    for gpu in gpus:
        label = str(gpu.gpu) if gpu.rank == 0 else f"{gpu.rank}/{gpu.gpu}"
        util, sm = _percent(gpu.util), _percent(gpu.sm_util)
        parts.append(f"GPU {label} {util:>4} SM {sm:>4} {_memory(gpu):>8}")
    lines: list[Text] = []
    line = ""
    for part in parts:
        if line and len(line) + 3 + len(part) > screen.width:
            lines.append(Text(line))
            line = ""
        line = f"{line}   {part}" if line else f"  {part}"
    if line:
        lines.append(Text(line))
    return lines


def _runs_table(screen: Screen, layout: ListLayout, *, header: bool) -> Table:
    """A table of the list's columns, as wide in every table of the frame (fixed widths)."""
    table = Table(
        box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, expand=False,
        header_style="bold" if screen.color else "", show_header=header,
    )  # fmt: skip
    table.add_column("RUN", width=layout.name_width, no_wrap=True, overflow="ellipsis")
    table.add_column("PROJECT", width=layout.project_width, no_wrap=True, overflow="ellipsis")
    if layout.status_width:
        table.add_column("STATUS", width=layout.status_width, no_wrap=True)
    columns = FIGURE_COLUMNS + (GPU_COLUMNS if layout.gpus else ())
    for name, width, right in columns:
        heading = layout.wait_heading if name == "INPUT WAIT" else name
        table.add_column(heading, justify="right" if right else "left", no_wrap=True, width=width)
    return table


def render_list(state: TopState, server: str, screen: Screen) -> RenderableType:
    shown = state.shown()
    running = sum(1 for v in state.runs.values() if v.status == "running")
    arrow = ("↓" if state.descending else "↑") if screen.unicode else (
        "desc" if state.descending else "asc"
    )  # fmt: skip
    title = f"{running} running · sort {state.sort} {arrow} · project {state.project or 'all'}"
    if not screen.unicode:
        title = title.replace("·", "|")
    selected = state.selected_view() if screen.interactive else None
    layout = ListLayout.of(shown, screen.width)
    # Lines for runs: all but the header, the table's header, the keys and any notice.
    room = max(1, screen.height - 2 - screen.interactive - bool(state.problem) - bool(state.notice))
    lines: list[tuple[list[Text], bool]] = []
    for view in shown:
        chosen = selected is not None and view.id == selected.id
        lines += [(row, chosen) for row in _run_rows(state, view, screen, layout)]
    # Scrolled only as far as needed to show the selected run's lines, its first at least.
    chosen_lines = [i for i, (_, chosen) in enumerate(lines) if chosen] or [0]
    start = min(chosen_lines[0], max(0, chosen_lines[-1] - room + 1))
    # Consecutive run lines share a table; a line of its own (an alert, GPUs under their run)
    # spans the width between tables. The columns are as wide in every table (fixed widths).
    tables: list[RenderableType] = []
    table = _runs_table(screen, layout, header=True)
    for row, chosen in lines[start : start + room]:
        style = "reverse" if chosen else ""  # reverse video, also without colour
        if len(row) == 1:
            alert = row[0].copy()
            alert.truncate(screen.width, overflow="ellipsis")
            tables += [table, alert]
            table = _runs_table(screen, layout, header=False)
        else:
            table.add_row(*row, style=style)
    if table.row_count or table.show_header:
        tables.append(table)
    parts: list[RenderableType] = [_header(state, server, screen, title), *tables]
    if not shown:
        what = "running runs" if not state.show_ended else "runs"
        where = f" in project {state.project}" if state.project else ""
        parts.append(Text(f"no {what}{where}", style="bright_black" if screen.color else ""))
    for line in (state.problem, state.notice):
        if line:
            text = Text(line, style="red" if screen.color and line == state.problem else "")
            text.truncate(screen.width, overflow="ellipsis")
            parts.append(text)
    if screen.interactive:
        keys = KEYS_LIST if screen.unicode else KEYS_LIST.replace("↑↓", "up/down")
        parts.append(Text(keys, style="bright_black" if screen.color else "", no_wrap=True))
    return Group(*parts)


def render_run(state: TopState, view: RunView, server: str, screen: Screen) -> RenderableType:
    """One run: sparklines of step time and input wait, its GPUs, alerts, advice, workers."""
    rate = view.steps_per_s
    title = f"{view.name} ({view.project}) · {view.status} · step {count_text(view.step)}"
    if rate is not None:
        title += f" · {rate:.1f} steps/s"
    if not screen.unicode:
        title = title.replace("·", "|")
    parts: list[RenderableType] = [_header(state, "", screen, title)]
    points = list(view.steps)
    spark_width = max(10, screen.width - 25)
    step_s = view.step_time_s
    line = Text(f"{'step time':<11}{'-' if step_s is None else ms_text(step_s):>11}  ")
    line.append(sparkline([p.dur for p in points], spark_width, screen))
    parts.append(line)
    waits = [min(1.0, (p.wait or 0.0) / p.dur) if p.dur > 0 else 0.0 for p in points]
    share, verdict_style = view.wait_share, VERDICT_STYLES.get(view.verdict or "", "")
    line = Text(f"{'input wait':<11}")
    line.append(
        f"{'-' if share is None else share_text(share):>11}",
        style=verdict_style if screen.color else "",
    )
    line.append(f"{'' if screen.color else VERDICT_MARKS.get(view.verdict or '', ''):<2}")
    line.append(
        sparkline(waits, spark_width - 1, screen, top=1.0),
        style=VERDICT_STYLES.get(view.verdict or "", "") if screen.color else "",
    )
    parts.append(line)
    # Each figure names what it covers, as in the browser.
    parts.append(
        Text(
            f"{'':<11}step time: median, {view.summary_window}; input wait: {view.wait_window}",
            style="bright_black" if screen.color else "",
        )
    )
    verdict = Text(f"verdict    {view.verdict_label} ({view.wait_window})")
    if screen.color:
        verdict.stylize(VERDICT_STYLES.get(view.verdict or "", ""), 11)
    parts.append(verdict)
    gpus = Table(box=None, padding=(0, 2, 0, 0), pad_edge=False, header_style="")
    for name in ("GPU", "UTIL", "SM", "MEM"):
        gpus.add_column(name, justify="right")
    for key in sorted(view.gpus):
        gpus.add_row(*_gpu_cells(view.gpus[key], screen))
    if view.gpus:
        parts.append(gpus)
    for alert in state.alerts_of(view.id):
        mark = "▲" if screen.unicode else "^"
        text = alert.get("message") or alert.get("rule_name", "alert")
        parts.append(Text(f"{mark} {text}", style="red" if screen.color else ""))
    workers = view.summary.get("workers") or []
    if workers:
        table = Table(
            box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="",
            title=f"workers, {view.summary_window}", title_justify="left",
        )  # fmt: skip
        for name in ("RANK", "HOST", "PID", "STATUS", "STEPS", "MEDIAN", "INPUT WAIT", "SAMPLES/S"):
            table.add_column(name, justify="left" if name in ("HOST", "STATUS") else "right")
        for worker in workers[: max(1, screen.height - 14)]:
            share = worker.get("input_wait_share")
            table.add_row(
                str(worker.get("rank", 0)), str(worker.get("host") or "-"),
                str(worker.get("pid") or "-"), str(worker.get("status") or "-"),
                count_text(worker.get("steps", 0)), _ms(worker.get("step_time_ms_median")),
                "-" if share is None else share_text(share),
                _number(worker.get("samples_per_s")),
            )  # fmt: skip
        parts.append(table)
    keys = Text(KEYS_RUN, style="bright_black" if screen.color else "")
    advice = _advice((view.diagnosis or {}).get("advice") or [], [*parts, keys], screen)
    return Group(*parts, *advice, keys)


def _lines(renderables: list[RenderableType], width: int) -> int:
    """How many lines these take at this width."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    return len(console.render_lines(Group(*renderables), console.options, pad=False))


def _advice_grid(items: list[str], screen: Screen) -> Table:
    grid = Table.grid(padding=(0, 1, 0, 1))  # wrapped lines hang under their text
    grid.add_column(no_wrap=True)
    grid.add_column()
    for item in items:
        grid.add_row("•" if screen.unicode else "-", item)
    return grid


def _advice(items: list[str], rest: list[RenderableType], screen: Screen) -> list[RenderableType]:
    """As many pieces of advice as fit on the screen below the rest, each whole."""
    room = screen.height - _lines(rest, screen.width) - 1  # its title
    kept: list[str] = []
    for item in items:
        if _lines([_advice_grid([*kept, str(item)], screen)], screen.width) > room:
            break
        kept.append(str(item))
    if not kept:
        return []
    return [Text("advice", style="bold" if screen.color else ""), _advice_grid(kept, screen)]


def render(state: TopState, server: str, screen: Screen) -> RenderableType:
    view = state.runs.get(state.opened) if state.opened is not None else None
    if view is not None:
        return render_run(state, view, server, screen)
    return render_list(state, server, screen)
