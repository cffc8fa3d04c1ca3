"""UI open time of a long run: navigation → the step-time chart drawn with points.

Builds a 1,000,000-step run (SQLite, as `bench.query` does), serves it with a real
`stoker serve`, opens `/#/runs/<id>` in headless Chromium several times and prints the
median time from navigation start until the step-time chart holds its points.

    .venv/bin/python -m bench.ui_open [--steps 1000000] [--repeat 7]
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.query import build
from stoker_server.core.settings import Settings
from tests.harness.support import ServerProcess

TARGET_S = 1.0
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-gpu",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="stoker-ui-open-") as tmp:
        settings = Settings(data_dir=Path(tmp))
        ids, build_s = build(settings, args.steps, 5)
        print(f"built 5 runs x {args.steps:,} steps in {build_s:.0f} s")
        env = {"STOKER_DATABASE_URL": settings.resolved_database_url()}
        server = ServerProcess(data_dir=Path(tmp), env=env).start()
        timings: list[float] = []
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=args.chromium, headless=True, args=CHROMIUM_ARGS
                )
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.goto(f"{server.url}/#/")  # warm the browser cache with the app itself
                page.get_by_test_id("run-row").first.wait_for()
                for _ in range(args.repeat):
                    page.goto("about:blank")
                    started = time.perf_counter()
                    page.goto(f"{server.url}/#/runs/{ids[0]}")
                    page.wait_for_function(
                        "() => Number(document.querySelector('[data-testid=step-time-chart]')"
                        "?.getAttribute('data-points') || 0) > 0",
                        timeout=30_000,
                    )
                    timings.append(time.perf_counter() - started)
                points = page.get_by_test_id("step-time-chart").get_attribute("data-points")
                browser.close()
        finally:
            server.stop()
    median = statistics.median(timings)
    print(f"machine load average {os.getloadavg()[0]:.1f}; chart points drawn: {points}")
    print("open times s: " + ", ".join(f"{t:.2f}" for t in timings))
    ratio = median / TARGET_S
    print(f"median open time {median:.2f} s (target < {TARGET_S:.0f} s, ratio {ratio:.2f})")


if __name__ == "__main__":
    main()
