"""The tokens a server bound beyond loopback makes on its first start (core/token_file.py)."""

import json
import os
import stat
import threading
from pathlib import Path

from stoker_server.core.token_file import load_or_make_tokens, token_path


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tokens_are_made_once_private_and_kept(tmp_path: Path) -> None:
    made = load_or_make_tokens(tmp_path)
    assert set(made) == {"viewer", "admin", "agent"} and len(set(made.values())) == 3
    assert all(len(token) >= 40 for token in made.values())
    assert _mode(token_path(tmp_path)) == 0o600
    assert load_or_make_tokens(tmp_path) == made
    assert os.listdir(tmp_path) == ["tokens.json"]  # no temporary file left


def test_a_token_file_others_can_read_is_made_private(tmp_path: Path) -> None:
    made = load_or_make_tokens(tmp_path)
    os.chmod(token_path(tmp_path), 0o644)
    assert load_or_make_tokens(tmp_path) == made
    assert _mode(token_path(tmp_path)) == 0o600


def test_a_missing_role_is_added_and_the_others_kept(tmp_path: Path) -> None:
    token_path(tmp_path).write_text(json.dumps({"viewer": "v" * 43, "agent": "a" * 43}))
    made = load_or_make_tokens(tmp_path)
    assert made["viewer"] == "v" * 43 and made["agent"] == "a" * 43 and made["admin"]
    assert json.loads(token_path(tmp_path).read_text()) == made


def test_servers_starting_together_agree_on_one_set(tmp_path: Path) -> None:
    results: list[dict[str, str]] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        results.append(load_or_make_tokens(tmp_path))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 8 and all(r == results[0] for r in results)
    assert json.loads(token_path(tmp_path).read_text()) == results[0]
