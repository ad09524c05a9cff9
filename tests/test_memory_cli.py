"""``kwtree commit``: a session file (a list, or an object with its id), --dry-run,
--no-turns, and errors as exit code 1 with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import log_bytes

from kwtree import KeywordTree
from kwtree.cli.main import main

MESSAGES = [{"role": "user", "content": "Hi, my name is Alice."},
            {"role": "assistant", "content": "Hello Alice!"}]


def run(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_commit_a_session_file_then_again_then_a_dry_run(tmp_path: Path, capsys) -> None:
    data_dir, session = tmp_path / "memory", tmp_path / "session.json"
    session.write_text(json.dumps({"session_id": "intro", "messages": MESSAGES[:1]}))
    code, out, _ = run(capsys, "commit", data_dir, session, "--scope", "user:alice")
    assert code == 0 and "session intro in user:alice\tmessages 0..1" in out
    with KeywordTree(data_dir, read_only=True) as tree:
        op = tree.history()[-1]
        assert op.kind == "commit_session" and out.startswith(op.op_id)
    session.write_text(json.dumps(MESSAGES))  # a plain list: the id comes from --session-id
    frozen = log_bytes(data_dir)
    code, out, _ = run(capsys, "commit", data_dir, session, "--scope", "user:alice", "--session-id", "intro",
                       "--dry-run", "--json")
    assert code == 0 and json.loads(out)["dry_run"] is True and json.loads(out)["first_new"] == 1
    assert log_bytes(data_dir) == frozen
    code, out, _ = run(capsys, "commit", data_dir, session, "--scope", "user:alice", "--session-id", "intro",
                       "--no-turns")
    assert code == 0 and "messages 1..2" in out
    with KeywordTree(data_dir, read_only=True) as tree:
        (session_kw,) = tree.find_keywords("intro")
        turns = [i for i in tree.get_infos_of_keyword(session_kw.id) if "turn" in i.metadata]
        assert [t.metadata["turn"] for t in turns] == [0]  # the second commit kept no turns


def test_commit_errors_exit_1_and_write_nothing(tmp_path: Path, capsys) -> None:
    data_dir, session = tmp_path / "memory", tmp_path / "session.json"
    KeywordTree(data_dir).close()
    frozen = log_bytes(data_dir)
    session.write_text(json.dumps(MESSAGES))
    code, _, err = run(capsys, "commit", data_dir, session)
    assert code == 1 and "pass --session-id" in err
    session.write_text("{not json")
    code, _, err = run(capsys, "commit", data_dir, session, "--session-id", "s")
    assert code == 1 and "is not JSON" in err
    code, _, err = run(capsys, "commit", data_dir, tmp_path / "missing.json", "--session-id", "s")
    assert code == 1 and "no session file" in err
    session.write_text(json.dumps([{"role": "user", "content": None}]))
    code, _, err = run(capsys, "commit", data_dir, session, "--session-id", "s")
    assert code == 1 and "messages[0].content" in err
    assert log_bytes(data_dir) == frozen
