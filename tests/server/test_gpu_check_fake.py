"""`bench/gpu_check.py --fake`: the real-GPU check, run on the CPU against the
fake NVML through the real binding and a real server it starts, passes, with every section
judged (NVML readings, GPM plausibility, starvation truth, the low-utilization rule firing
and resolving, energy per phase) and none skipped."""

import json
import subprocess
import sys
from pathlib import Path

from tests.harness.support import REPO


def test_gpu_check_fake_passes(fake_nvml_library: Path, tmp_path: Path) -> None:
    report = tmp_path / "gpu-check.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--fake", "--quick", "--json", str(report)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    print(done.stdout[-6000:], done.stderr[-3000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(report.read_text())["results"]
    verdicts = {(section, verdict) for section, verdict, _ in results}
    for section in ("nvml", "gpm", "starvation", "alert", "energy"):
        assert (section, "PASS") in verdicts, section
    assert not [r for r in results if r[1] in ("FAIL", "SKIP")]
    assert "Stoker GPU check on NVIDIA H100 80GB HBM3 (fake)" in done.stdout
