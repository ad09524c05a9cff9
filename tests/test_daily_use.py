"""Daily use (issue 27), the smaller items: a session's summary is dated by its session, so a
time filter reads it as the session; ``import kwtree.git`` works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from memory_helpers import scope_part

from kwtree import CommitOptions, KeywordTree
from kwtree.memory.commit import SUMMARY_KIND
from kwtree.models import HAPPENED_AT


def _open(path: Path) -> KeywordTree:
    return KeywordTree(path, durability="none", embed_async=False)


def _summary_of(tree: KeywordTree, scope: str) -> dict[str, object]:
    return next(info.metadata for info in tree.get_infos_of_keyword(scope_part(tree, scope, "sessions", "s1").id)
                if info.metadata.get("kind") == SUMMARY_KIND)


def test_a_session_summary_happened_when_its_session_did(tmp_path: Path) -> None:
    with _open(tmp_path / "m") as tree:
        tree.commit_session([{"role": "user", "content": "I adopted a greyhound called Pixel."}],
                            session_id="s1", scope="user:ana", options=CommitOptions(session_time="2023-03-04"))
        assert _summary_of(tree, "user:ana")[HAPPENED_AT] == 1_677_888_000.0  # 2023-03-04
        later = tree.recall("Session s1 greyhound Pixel", scope="user:ana", since="2024-01-01", min_score=0)
        assert later == []
        earlier = tree.recall("Session s1 greyhound Pixel", scope="user:ana", until="2023-12-31", min_score=0)
        assert any(hit.info.metadata.get("kind") == SUMMARY_KIND for hit in earlier)


def test_without_a_session_time_the_summary_takes_its_first_message_s_time(tmp_path: Path) -> None:
    with _open(tmp_path / "m") as tree:
        tree.commit_session([{"role": "user", "content": "I adopted a greyhound.", "ts": "2022-06-01T10:00:00Z"},
                             {"role": "user", "content": "He is called Pixel.", "ts": "2022-06-02T10:00:00Z"}],
                            session_id="s1", scope="user:ana")
        assert _summary_of(tree, "user:ana")[HAPPENED_AT] == 1_654_077_600.0  # 2022-06-01T10:00Z


def test_kwtree_git_imports_as_a_module() -> None:
    run = subprocess.run([sys.executable, "-c", "import kwtree.git; print(kwtree.git.setup.__name__)"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "setup"
