"""Public training scripts behave the same under `stoker run` as without it (issue 24).

Each script marked `"ci": true` in tests/corpus/manifest.json runs plain and under
`stoker run` against one real `stoker serve` (bench/corpus.py does the work and prints the
same checks for the whole corpus). A difference fails the test: exit code, a hang, the
History (losses within 1e-5), one finished run per fit with Keras's batch count, or wall time
beyond 1.5x + 3 s. The scripts are public code, not committed: a missing one is downloaded
at its pinned commit and checked against its sha256; when that is impossible the test is
skipped locally and fails in CI.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import corpus
from tests.conftest import require
from tests.support import ServerProcess

pytest.importorskip("tensorflow")

CI_ENTRIES = [entry for entry in corpus.load_manifest() if entry.ci]


@pytest.fixture(scope="module")
def corpus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = corpus.start_server(tmp_path_factory.mktemp("corpus"))
    yield server
    server.stop()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("entry", CI_ENTRIES, ids=[entry.name for entry in CI_ENTRIES])
def test_public_script_behaves_the_same_under_stoker_run(
    entry: corpus.Entry, corpus_server: ServerProcess, tmp_path: Path
) -> None:
    problem = corpus.obtain(entry, download=True, git_dirs={})
    require(problem is None, f"the corpus script {entry.name} ({problem})")
    outcome = corpus.check(entry, corpus_server, tmp_path)
    tails = ""
    if outcome.stoker is not None:
        tails = f"\n--- stoker run output (tail) ---\n{outcome.stoker.output_tail}"
    assert outcome.ok, f"{entry.name} ({entry.source}): " + "; ".join(outcome.problems) + tails


def test_manifest_names_are_unique_and_hashes_are_sha256() -> None:
    entries = corpus.load_manifest()
    assert len({entry.name for entry in entries}) == len(entries)
    assert all(len(entry.sha256) == 64 and int(entry.sha256, 16) >= 0 for entry in entries)
    assert len({(entry.repository, entry.path) for entry in entries}) >= 20
