"""Each public script of tests/corpus/manifest.json marked `"ci": true` runs plain and
under `stoker run` against one real `stoker serve` (bench/corpus.py does the work and prints the
same checks for the whole corpus). A difference fails the test: exit code, a hang, the History
(losses within 1e-5), one finished run per fit with Keras's batch count, or wall time beyond
1.5x + 3 s.

The scripts are other people's code, never committed: they run only where someone placed them
in tests/corpus/scripts/ (`bench/corpus.py --from-git OWNER/NAME=GIT_DIR`). Where a script is
not there the test is skipped, in CI too, with the command that places it: CI reaches only the
package registries. What the corpus found wrong is kept in CI by our own scripts of the same
shapes, tests/examples/corpus_*.py, run by tests/fit/test_corpus_shapes.py.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import corpus
from tests.harness.support import ServerProcess

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
    entry: corpus.Entry, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    problem = corpus.script_problem(entry)
    if problem is not None and not entry.script.exists():
        pytest.skip(f"public script not placed (never committed): {corpus.missing_line([entry])}")
    assert problem is None, problem
    server: ServerProcess = request.getfixturevalue("corpus_server")
    outcome = corpus.check(entry, server, tmp_path)
    tails = ""
    if outcome.stoker is not None:
        tails = f"\n--- stoker run output (tail) ---\n{outcome.stoker.output_tail}"
    assert outcome.ok, f"{entry.name} ({entry.source}): " + "; ".join(outcome.problems) + tails


def test_manifest_pins_at_least_20_scripts_by_repository_commit_and_sha256() -> None:
    entries = corpus.load_manifest()
    assert len({entry.name for entry in entries}) == len(entries)
    assert all(len(entry.sha256) == 64 and int(entry.sha256, 16) >= 0 for entry in entries)
    assert all(len(entry.commit) == 40 and int(entry.commit, 16) >= 0 for entry in entries)
    assert all(entry.repository.count("/") == 1 for entry in entries)
    assert len({(entry.repository, entry.path) for entry in entries}) >= 20


def test_no_outside_host_is_named_in_the_corpus_files() -> None:
    """Sources are written owner/name@commit:path; nothing committed points at a host."""
    root = Path(corpus.__file__).resolve().parent.parent
    files = [root / "bench" / "corpus.py", corpus.MANIFEST, corpus.CORPUS / "README.md",
             corpus.OFFLINE / "sitecustomize.py"]  # fmt: skip
    for path in files:
        text = path.read_text()
        assert "://" not in text, f"{path.name} names a URL"


def test_a_missing_script_is_named_with_the_command_that_places_it() -> None:
    entry = corpus.load_manifest()[0]
    line = corpus.missing_line([entry])
    assert entry.name in line
    assert f"--from-git {entry.repository}=GIT_DIR" in line
    assert entry.commit[:10] in line
