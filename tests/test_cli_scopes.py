"""``--scope``, ``--min-score``, ``--since`` and ``--until`` on the reading commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.cli.main import main
from kwtree.memory_schema import HAPPENED_AT
from kwtree.models import ROOT_ID


@pytest.fixture
def memory(tree_dir: Path) -> Path:
    with KeywordTree(tree_dir, durability="none", worker=False, embed_async=False) as tree:
        for user, milk, when in (("alice", "oat", 1714000000), ("bob", "whole", 1600000000)):
            scope = tree.create_keyword(f"user:{user}", ROOT_ID, metadata={"scope": f"user:{user}"})
            coffee = tree.create_keyword("Coffee", scope.id)
            tree.create_info(f"Takes {milk} milk in the morning coffee", keyword_ids=[coffee.id],
                             metadata={HAPPENED_AT: when})
    return tree_dir


def run(capsys: pytest.CaptureFixture[str], *argv: object, code: int = 0) -> tuple[str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == code, f"kwtree {argv} exited {rc}\nstdout: {out}\nstderr: {err}"
    return out, err


def test_recall_and_context_read_only_the_scopes_given(memory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = run(capsys, "recall", memory, "milk coffee", "--scope", "user:alice")
    assert "oat milk" in out and "whole milk" not in out
    out, _ = run(capsys, "recall", memory, "milk coffee", "--scope", "user:alice", "--scope", "user:bob")
    assert "oat milk" in out and "whole milk" in out
    out, _ = run(capsys, "context", memory, "milk coffee", "--scope", "user:bob")
    assert '- [api, 2020-09-13] "Takes whole milk in the morning coffee"' in out and "oat" not in out
    out, _ = run(capsys, "recall", memory, "milk coffee", "--scope", "user:carol")
    assert out.strip() == ""
    _, err = run(capsys, "recall", memory, "milk coffee", "--scope", "User:Alice", code=1)
    assert "scope" in err


def test_the_floor_and_the_time_window_from_the_command_line(memory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "recall", memory, "What is the capital of France?")[0].strip() == ""
    assert run(capsys, "recall", memory, "What is the capital of France?", "--min-score", "0")[0].strip()
    out, _ = run(capsys, "recall", memory, "milk coffee", "--since", "2024-01-01")
    assert "oat" in out and "whole" not in out
    out, _ = run(capsys, "recall", memory, "milk coffee", "--until", "1600000000")
    assert "whole" in out and "oat" not in out
    hits = json.loads(run(capsys, "recall", memory, "milk coffee", "--json")[0])
    assert all(0 <= hit["relevance"] <= 1 for hit in hits)
    _, err = run(capsys, "recall", memory, "milk", "--since", "last week", code=1)
    assert "since" in err
    _, err = run(capsys, "recall", memory, "milk", "--min-score", "2", code=1)
    assert "min_score" in err


def test_search_and_history_in_a_scope(memory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = run(capsys, "search", memory, "Coffee", "--exact")
    assert out.startswith("ambiguous")
    out, _ = run(capsys, "search", memory, "Coffee", "--exact", "--scope", "user:alice")
    assert "matched" in out and "user:alice › Coffee" in out
    everything = run(capsys, "history", memory)[0].splitlines()
    alice = run(capsys, "history", memory, "--scope", "user:alice")[0].splitlines()
    assert len(alice) == 3 and len(everything) > len(alice)  # her scope, her keyword, her memory
