"""Daily use (issue 27), the smaller items: a session's summary is dated by its session, so a
time filter reads it as the session; ``import kwtree.git`` works; control characters are stored
as given and shown escaped by the CLI; a snapshot or export under a file names the file; ``infos``
says when more remain."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from memory_helpers import scope_part

from kwtree import CommitOptions, InvalidInputError, KeywordTree, NotFoundError
from kwtree.memory_schema import HAPPENED_AT, SUMMARY_KIND


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


TERMINAL_OUTPUT = "build log \x1b[31mRED\x1b[0m bell\x07 nul\x00 csi\x9b and \x01 here"


def test_control_characters_are_stored_as_given_and_shown_escaped(tmp_path: Path) -> None:
    with _open(tmp_path / "m") as tree:
        keyword = tree.create_keyword("Terminal")
        info = tree.create_info(TERMINAL_OUTPUT, keyword_ids=[keyword.id])
    with _open(tmp_path / "m") as tree:
        assert tree.get_info(info.id).content == TERMINAL_OUTPUT
    for command in (["info", info.id], ["infos", keyword.id], ["recall", "build log"]):
        run = subprocess.run([sys.executable, "-m", "kwtree", command[0], str(tmp_path / "m"), *command[1:]],
                             capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr
        assert "\\x1b[31mRED\\x1b[0m bell\\x07 nul\\x00 csi\\x9b and \\x01 here" in run.stdout, command
        assert not any((ord(ch) < 32 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F for ch in run.stdout), command


def test_a_snapshot_or_export_under_a_file_says_the_file_is_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a directory")
    with _open(tmp_path / "m") as tree:
        tree.create_keyword("Python")
        for write in (tree.snapshot, tree.export):
            for target in (tmp_path / "notes.txt" / "out", tmp_path / "notes.txt" / "deeper" / "out"):
                with pytest.raises(InvalidInputError, match=r"notes\.txt is a file, not a directory"):
                    write(target)
            with pytest.raises(NotFoundError, match="does not exist; create it first"):
                write(tmp_path / "missing" / "out")
        assert [name for name in os.listdir(tmp_path) if name != "m"] == ["notes.txt"]


def test_infos_says_on_stderr_when_more_remain(tmp_path: Path) -> None:
    with _open(tmp_path / "m") as tree:
        keyword = tree.create_keyword("Notes")
        for number in range(3):
            tree.create_info(f"note {number}", keyword_ids=[keyword.id])

    def infos(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kwtree", "infos", str(tmp_path / "m"), "Notes", *more],
                              capture_output=True, text=True, check=False)

    first = infos("--size", "2")
    assert len(first.stdout.splitlines()) == 2 and first.stderr == "2 infos shown; more: --page 1\n"
    last = infos("--size", "2", "--page", "1")
    assert len(last.stdout.splitlines()) == 1 and last.stderr == ""
    assert infos("--size", "3").stderr == ""
