"""``kwtree assemble`` and ``kwtree bootstrap``: the hooks' blocks printed, --json, the budget,
an empty scope printing nothing, and errors as exit codes with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import log_bytes

from kwtree import KeywordTree
from kwtree.cli.main import main
from kwtree.retrieval.context import estimate_tokens
from kwtree.retrieval.fence import FENCE_OPEN, NOTE

MESSAGES = [{"role": "user", "content": "Hi, my name is Alice. I love green tea.", "ts": "2024-05-08T10:00:00"},
            {"role": "assistant", "content": "Shall I brew some now?"}]


def run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _seeded(tmp_path: Path) -> Path:
    data_dir = tmp_path / "memory"
    with KeywordTree(data_dir) as tree:
        tree.commit_session(MESSAGES, session_id="intro", scope="user:alice")
    return data_dir


def test_assemble_and_bootstrap_print_the_hooks_blocks(tmp_path: Path, capsys) -> None:
    data_dir = _seeded(tmp_path)
    code, out, _ = run(capsys, "assemble", data_dir, "what tea does Alice like?", "--scope", "user:alice")
    assert code == 0
    with KeywordTree(data_dir, read_only=True) as tree:
        assert out == tree.assemble("what tea does Alice like?", "user:alice") + "\n"
        expected_bootstrap = tree.bootstrap("user:alice", 120)
    assert out.startswith(f'{FENCE_OPEN}\n{NOTE}\n## Profile\n- [user, 2024-05-08] "Hi, my name is Alice."\n'
                          '## Preferences\n')
    code, out, _ = run(capsys, "bootstrap", data_dir, "--scope", "user:alice", "--max-tokens", "120")
    assert code == 0 and out == expected_bootstrap + "\n" and estimate_tokens(out) <= 120
    assert ', open questions] ["Shall I brew some now?"]' in out
    code, out, _ = run(capsys, "bootstrap", data_dir, "--scope", "user:alice", "--json")
    assert code == 0 and json.loads(out).startswith(f"{FENCE_OPEN}\n{NOTE}\n## Profile")


def test_an_empty_scope_prints_nothing(tmp_path: Path, capsys) -> None:
    data_dir = _seeded(tmp_path)
    code, out, _ = run(capsys, "assemble", data_dir, "green tea", "--scope", "user:bob")
    assert code == 0 and out.strip() == ""
    code, out, _ = run(capsys, "bootstrap", data_dir, "--scope", "user:bob", "--scope", "agent:x")
    assert code == 0 and out.strip() == ""


def test_errors_exit_non_zero_and_write_nothing(tmp_path: Path, capsys) -> None:
    data_dir = _seeded(tmp_path)
    frozen = log_bytes(data_dir)
    code, _, err = run(capsys, "assemble", data_dir, "tea", "--scope", "alice")
    assert code == 1 and "scope[0] 'alice'" in err
    code, _, err = run(capsys, "bootstrap", data_dir, "--scope", "user:alice", "--max-tokens", "0")
    assert code == 1 and "max_tokens" in err
    try:
        code = main(["bootstrap", str(data_dir)])
    except SystemExit as exc:  # argparse: --scope is required
        code = int(exc.code or 0)
    assert code == 2 and "--scope" in capsys.readouterr().err
    assert log_bytes(data_dir) == frozen
