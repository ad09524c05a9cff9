"""The ``kwtree`` command: every subcommand run in-process through ``main()`` on real tree
directories, the error mapping, the help and docs, and real runs of the console script."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import log_bytes

from kwtree import Info, Keyword, KeywordTree
from kwtree.cli.main import COMMANDS, EXAMPLE_SETUP, build_parser, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "cli.md"
SCRIPT = Path(sys.executable).parent / "kwtree"
KEYWORD_FIELDS = {f.name for f in dataclasses.fields(Keyword)}
INFO_FIELDS = {f.name for f in dataclasses.fields(Info)}
OPERATION_FIELDS = {"op_id", "kind", "actor", "timestamp", "entity_ids", "audit"}


@pytest.fixture
def kw(capsys):
    """Run ``kwtree ARGS`` in-process; check the exit code, return (stdout, stderr)."""

    def run(*argv: object, code: int = 0) -> tuple[str, str]:
        rc = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert rc == code, f"kwtree {argv} exited {rc}, expected {code}\nstdout: {out}\nstderr: {err}"
        if code == 1:
            assert err.startswith("error: ") and "Traceback" not in err
        return out, err

    return run


@pytest.fixture
def js(kw):
    """Run ``kwtree ARGS --json`` in-process and parse its stdout."""

    def run(*argv: object) -> object:
        return json.loads(kw(*argv, "--json")[0])

    return run


@pytest.fixture
def d(tree_dir: Path, kw) -> Path:
    kw("init", tree_dir, "--durability", "none")
    return tree_dir


def first_field(out: str) -> str:
    return out.splitlines()[0].split("\t")[0]


def test_init_creates_a_tree_and_is_harmless_on_an_existing_one(tree_dir: Path, kw, js) -> None:
    out, _ = kw("init", tree_dir)
    assert "1 operation" in out and (tree_dir / "manifest.json").exists()
    before = log_bytes(tree_dir)
    report = js("init", tree_dir)
    assert report["operations"] == 1 and report["data_dir"] == str(tree_dir)
    assert log_bytes(tree_dir) == before


def test_keyword_commands(d: Path, kw, js) -> None:
    work = js("add", d, "Work", "--durability", "none")
    assert set(work) == KEYWORD_FIELDS and work["parent_id"] == "root" and work["level"] == 1
    tools = first_field(kw("add", d, "Tools", "--parent", work["id"])[0])
    out, _ = kw("add", d, "Python", "--parent", tools, "--alias", "py", "--alias", "python3",
                "--description", "scripting", "--metadata", '{"lang": "en"}')
    py = first_field(out)
    assert out.split("\t")[1] == "Python" and "(aka py, python3)" in out

    assert [k["name"] for k in js("children", d, "root")] == ["Work"]
    assert kw("children", d, work["id"])[0] == f"{tools}\tTools\n"
    assert kw("path", d, py)[0] == "root › Work › Tools › Python\n"
    assert [k["id"] for k in js("path", d, py)] == ["root", work["id"], tools, py]
    assert first_field(kw("find", d, "PY")[0]) == py
    assert first_field(kw("find", d, "  p-y ")[0]) == py
    assert kw("find", d, "Ruby")[0] == ""

    detail = kw("get", d, py)[0]
    assert re.search(r"^name: +Python$", detail, re.M) and re.search(r"^aliases: +py, python3$", detail, re.M)
    assert re.search(r'^metadata: +\{"lang": "en"\}$', detail, re.M)
    got = js("get", d, py)
    assert got["aliases"] == ["py", "python3"] and got["metadata"] == {"lang": "en"} and got["version"] == 1

    updated = js("update", d, py, "--version", 1, "--name", "Python 3", "--alias", "py", "--description", "lang")
    assert (updated["name"], updated["aliases"], updated["description"], updated["version"]) == (
        "Python 3", ["py"], "lang", 2)
    assert js("update", d, py, "--version", 2, "--clear-aliases")["aliases"] == []
    assert js("add-alias", d, py, "cpython")["aliases"] == ["cpython"]
    assert js("remove-alias", d, py, "CPython")["aliases"] == []
    assert js("update", d, py, "--version", 5, "--metadata", "{}")["metadata"] == {}

    assert js("move", d, py, work["id"])["parent_id"] == work["id"]
    _, err = kw("move", d, work["id"], py, code=1)
    assert "cannot move" in err
    golang = first_field(kw("add", d, "Golang", "--parent", tools)[0])
    merged = js("merge", d, golang, py)
    assert merged["id"] == py and "Golang" in merged["aliases"]
    assert first_field(kw("find", d, "golang")[0]) == py

    _, err = kw("delete", d, work["id"], code=1)
    assert "child keyword" in err and "hint: pass --cascade" in err
    op = js("delete", d, work["id"], "--cascade", "--info-policy", "keep")
    assert set(op) == OPERATION_FIELDS and op["kind"] == "delete_keyword"
    assert {py, tools, work["id"]} <= set(op["entity_ids"])
    assert kw("children", d, "root")[0] == ""
    _, err = kw("get", d, py, code=1)
    assert "deleted" in err


def test_info_link_and_relation_commands(d: Path, kw, js) -> None:
    a = js("add", d, "Alpha")["id"]
    b = js("add", d, "Beta")["id"]
    info = js("add-info", d, "Alpha  and\nbeta note", "--keyword", a, "--keyword", b, "--source", "chat",
              "--metadata", '{"n": 1}')
    assert set(info) == INFO_FIELDS and info["metadata"] == {"n": 1}
    iid = info["id"]
    assert kw("infos", d, a)[0] == f"{iid}\tAlpha and beta note\t[chat]\n"
    assert "content:" in kw("info", d, iid)[0]
    assert js("info", d, iid)["content"] == "Alpha  and\nbeta note"
    linked = js("keywords-of", d, iid)
    assert [(x["keyword"]["id"], x["relation"]) for x in linked] == [(a, "primary"), (b, "primary")]
    assert kw("keywords-of", d, iid)[0].splitlines()[0] == f"{a}\tprimary\tAlpha"

    link = js("link", d, iid, b, "--relation", "example", "--created-by", "agent")
    assert (link["relation"], link["created_by"]) == ("example", "agent")
    assert [i["id"] for i in js("infos", d, b, "--relation", "example")] == [iid]
    assert js("infos", d, a, "--relation", "example") == []
    assert js("infos", d, a, "--page", 1, "--size", 1) == []
    kw("infos", d, a, "--size", 0, code=1)
    op = js("unlink", d, iid, b)
    assert op["kind"] == "unlink_info" and op["entity_ids"] == [f"{iid}/{b}"]
    kw("unlink", d, iid, b, code=1)

    assert js("update-info", d, iid, "--content", "new text", "--version", 1)["content"] == "new text"
    _, err = kw("update-info", d, iid, "--source", "x", "--version", 1, code=1)
    assert "version conflict" in err and "hint:" in err

    rel = js("relate", d, a, b, "--type", "see_also", "--weight", 0.5, "--reason", "why not")
    assert (rel["type"], rel["weight"], rel["reason"]) == ("see_also", 0.5, "why not")
    out, _ = kw("relations", d, a)
    assert out == f"{a}\t-[see_also 0.5]->\t{b}\twhy not\t(Alpha → Beta)\n"
    assert js("relations", d, b) == []
    assert [r["from_id"] for r in js("relations", d, b, "--direction", "in")] == [a]
    assert js("relations", d, a, "--type", "other") == []
    kw("unrelate", d, a, b, "--type", "other", code=1)
    assert js("unrelate", d, a, b)["kind"] == "unrelate"
    assert js("relations", d, a, "--direction", "both") == []

    assert "delete_info" in kw("delete-info", d, iid)[0]
    kw("info", d, iid, code=1)


def test_tree_text_and_json(d: Path, kw, js) -> None:
    top = js("add", d, "Top", "--alias", "t")["id"]
    mid = js("add", d, "Mid", "--parent", top)["id"]
    js("add", d, "Leaf", "--parent", mid)
    js("add-info", d, "a note", "--keyword", mid)
    js("add", d, "C[/b] tricks")  # rich markup in a name prints as it is
    js("add", d, "[red]x")
    out = kw("tree", d)[0]
    assert out.splitlines()[0] == "root"
    for text in ("Top (t)", "Mid · 1 info", "Leaf", "C[/b] tricks", "[red]x"):
        assert text in out
    assert "Leaf" not in kw("tree", d, "--depth", 2)[0]
    assert kw("tree", d, "--root", mid)[0].splitlines() == ["Mid · 1 info", "└── Leaf"]
    nested = js("tree", d, "--depth", 1)
    assert nested["id"] == "root" and [c["name"] for c in nested["children"]] == ["Top", "C[/b] tricks", "[red]x"]
    assert "children" not in nested["children"][0]
    assert js("tree", d, "--root", top)["children"][0]["children"][0]["name"] == "Leaf"
    kw("tree", d, "--root", "nope", code=1)
    kw("tree", d, "--depth", -1, code=2)


def test_history_undo_metrics_and_as_of(d: Path, kw, js) -> None:
    a = js("add", d, "A")
    after_a = a["op_id"]
    b = js("add", d, "B", "--parent", a["id"], "--actor", "agent-7", "--durability", "full")
    history = js("history", d)
    assert [op["kind"] for op in history] == ["init", "create_keyword", "create_keyword"]
    assert all(set(op) == OPERATION_FIELDS for op in history) and history[-1]["actor"] == "agent-7"
    lines = kw("history", d, "--entity", b["id"])[0].splitlines()
    assert len(lines) == 1 and lines[0].startswith(b["op_id"] + "\t") and "create_keyword\tby agent-7" in lines[0]
    assert [op["op_id"] for op in js("history", d, "--limit", 1)] == [b["op_id"]]

    # --as-of: the tree as it was after an operation, or at a time
    assert js("children", d, a["id"], "--as-of", after_a) == []
    assert [k["id"] for k in js("children", d, a["id"])] == [b["id"]]
    assert js("children", d, a["id"], "--as-of", repr(b["created_at"]))[0]["id"] == b["id"]
    assert js("metrics", d, "--as-of", after_a)["keywords"] == 1
    assert len(js("history", d, "--as-of", after_a)) == 2
    _, err = kw("get", d, b["id"], "--as-of", after_a, code=1)
    assert "error:" in err
    kw("get", d, "root", "--as-of", "0" * 32, code=1)
    kw("get", d, "root", "--as-of", 1.0, code=1)  # nothing before 1970-01-01T00:00:01
    kw("get", d, "root", "--as-of", "1970-01-02T00:00:00+00:00", code=1)

    undo = js("undo", d, b["op_id"])
    assert undo["kind"] == "undo" and undo["audit"] == {"undo_of": b["op_id"]} and undo["entity_ids"] == [b["id"]]
    kw("get", d, b["id"], code=1)
    _, err = kw("undo", d, b["op_id"], code=1)
    assert "cannot undo" in err and "hint: pass --force" in err
    assert "nothing to undo" in kw("undo", d, b["op_id"], "--force")[0]
    assert js("undo", d, b["op_id"], "--force") is None
    kw("undo", d, "f" * 32, code=1)

    metrics = js("metrics", d)
    assert (metrics["keywords"], metrics["operations"]) == (1, 4)
    text = kw("metrics", d)[0]
    assert re.search(r"^keywords: +1$", text, re.M) and re.search(r"^depth_mean: +1\.00$", text, re.M)


def test_load_an_outline(tmp_path: Path, kw, js) -> None:
    outline = tmp_path / "outline.json"
    outline.write_text(json.dumps({
        "keywords": [{"ref": "t", "name": "Tools"}, {"ref": "py", "name": "Python", "parent": "t"}],
        "infos": [{"content": "uses uv", "keywords": ["py"]}],
        "relations": [{"from": "py", "to": "t", "type": "part_of"}],
    }))
    out, _ = kw("load", tmp_path / "new", outline)
    with KeywordTree(tmp_path / "new", read_only=True) as tree:
        op = tree.last_op_id
    assert out == (f"loaded 2 keywords, 1 infos and 1 relations into {tmp_path / 'new'} (operation {op}: "
                   f"kwtree undo {tmp_path / 'new'} {op} takes it back)\n")
    loaded = js("load", tmp_path / "other", outline)
    assert set(loaded["keyword_ids"]) == {"t", "py"} and (loaded["infos"], loaded["relations"]) == (1, 1)
    assert len(loaded["op_id"]) == 32
    _, err = kw("load", tmp_path / "new", outline, code=1)
    assert "already has a child named 'Tools'" in err
    kw("load", tmp_path / "third", tmp_path / "missing.json", code=1)
    (tmp_path / "bad.json").write_text("[1, 2]")
    kw("load", tmp_path / "third", tmp_path / "bad.json", code=1)


def test_quickstart_in_process(tmp_path: Path, kw) -> None:
    out, _ = kw("quickstart", "--dir", tmp_path / "memory")
    assert "Reopened from the log alone" in out
    _, err = kw("quickstart", "--dir", tmp_path / "memory", code=1)  # not empty any more
    assert "not empty" in err
    kw("quickstart", "--dir", tmp_path / "memory", "--outline", "x.json", code=2)  # use `kwtree load`


def test_errors_map_to_exit_codes(d: Path, tmp_path: Path, kw) -> None:
    before = log_bytes(d)
    _, err = kw("get", d, "no-such-id", code=1)
    assert "no-such-id" in err
    for argv in (("children", d, "nope"), ("info", d, "nope"), ("path", d, "nope"), ("relations", d, "nope"),
                 ("move", d, "nope", "root"), ("add", d, "X", "--parent", "nope"), ("link", d, "i", "root"),
                 ("delete", d, "root"), ("update", d, "root", "--version", 1, "--name", "x"),
                 ("update", d, "root", "--version", 1), ("add", d, "  "),
                 ("relate", d, "root", "root", "--weight", "nan")):
        kw(*argv, code=1)
    _, err = kw("add", d, "X", "--metadata", "{not json", code=1)
    assert "--metadata is not valid JSON" in err
    _, err = kw("add", d, "X", "--metadata", "[1, 2]", code=1)
    assert "JSON object" in err
    kw("add-info", d, "note", "--metadata", "nul", code=1)
    kw("update", d, "root", "--version", 1, "--alias", "a", "--clear-aliases", code=1)
    kw("update", d, "root", "--version", 1, "--description", "d", "--metadata", "1", code=1)
    assert log_bytes(d) == before  # failed commands and reads wrote nothing

    for argv in ((), ("nope",), ("get", d), ("get",), ("add", d, "X", "--bogus"), ("update", d, "root"),
                 ("infos", d, "root", "--size", "many"), ("link", d, "i", "k", "--relation", "bad"),
                 ("get", d, "root", "--as-of", "yesterday"), ("add", d, "X", "--as-of", "0" * 32),
                 ("get", d, "root", "--durability", "none"), ("init", d, "--durability", "sometimes")):
        _, err = kw(*argv, code=2)
        assert "usage:" in err

    missing = tmp_path / "missing"
    _, err = kw("get", missing, "root", code=1)
    assert "not a kwtree directory" in err
    _, err = kw("add", missing, "X", code=1)
    assert f"kwtree init {missing}" in err
    assert not missing.exists()
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    kw("init", stray, code=1)
    kw("metrics", stray, code=1)
    assert [p.name for p in stray.iterdir()] == ["notes.txt"]


def test_help_and_version(kw) -> None:
    out, _ = kw("--help")
    for command in COMMANDS:
        assert f"    {command.name}" in out
    assert EXAMPLE_SETUP.splitlines()[1] in out
    assert "kwtree get ./memory" in kw("get", "--help")[0]
    assert kw("--version")[0] == "kwtree 0.1.0\n"


def test_every_command_has_a_help_example_and_a_docs_section() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names = list(subparsers.choices)
    assert names == [command.name for command in COMMANDS]
    docs = DOCS.read_text()
    documented = re.findall(r"^## kwtree (\S+)$", docs, re.M)
    assert documented == names  # every command, in the order of `kwtree --help`, and no others
    assert EXAMPLE_SETUP in docs
    for command in COMMANDS:
        help_text = subparsers.choices[command.name].format_help()
        example = f"kwtree {command.name} {command.example}"
        assert f"example: {example}\n" in help_text
        section = docs.split(f"## kwtree {command.name}\n", 1)[1].split("\n## ", 1)[0]
        assert f"```bash\n{example}\n```" in section, f"docs section of {command.name} lacks its example"


# --- real processes --------------------------------------------------------------------------------

needs_script = pytest.mark.skipif(not SCRIPT.exists(), reason="the kwtree console script is not installed")


def run_script(*argv: object, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *map(str, argv)], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=120)


@needs_script
def test_console_script_quickstart_then_tree(tmp_path: Path) -> None:
    quick = run_script("quickstart", "--dir", tmp_path / "memory", cwd=tmp_path)
    assert quick.returncode == 0, quick.stderr
    assert "kwtree quickstart" in quick.stdout and "Reopened from the log alone" in quick.stdout
    shown = run_script("tree", tmp_path / "memory", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("root\n") and "Python (py) · 1 info" in shown.stdout
    py = run_script("find", tmp_path / "memory", "python", cwd=tmp_path).stdout.split("\t")[0]
    added = run_script("add-info", tmp_path / "memory", "-", "--keyword", py, cwd=tmp_path, stdin="from\nstdin\n")
    assert added.returncode == 0 and "\tfrom stdin\n" in added.stdout
    failed = run_script("get", tmp_path / "memory", "nope", cwd=tmp_path)
    assert failed.returncode == 1 and failed.stderr.startswith("error: ") and "Traceback" not in failed.stderr
    assert run_script("get", cwd=tmp_path).returncode == 2
    module = subprocess.run([sys.executable, "-m", "kwtree", "metrics", tmp_path / "memory", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert module.returncode == 0 and json.loads(module.stdout)["keywords"] == 32  # 30 loaded + 2 the agent placed


@needs_script
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("cut") is None, reason="needs bash and cut")
def test_help_examples_run_in_order_after_the_setup(tmp_path: Path) -> None:
    """The docs' promise: after EXAMPLE_SETUP, every command's example runs, in table order."""
    (tmp_path / "data").mkdir()
    shutil.copy(ROOT / "data" / "quickstart.json", tmp_path / "data" / "quickstart.json")
    lines = ["set -euo pipefail", EXAMPLE_SETUP.replace("--dir ./memory", "--dir ./memory >/dev/null", 1)]
    lines += [f'echo "### {c.name}"; kwtree {c.name} {c.example}' for c in COMMANDS]
    env = {**os.environ, "PATH": f"{SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", "\n".join(lines)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert done.stderr == ""
    out = done.stdout
    assert out.count("### ") == len(COMMANDS)
    assert "Rust\t(aka rs)" in out and "(Billing Service → PostgreSQL)" in out
    with KeywordTree(tmp_path / "memory", read_only=True) as tree:
        python = tree.find_keywords("Python")[0]
        assert "asyncio" in python.aliases and "py" not in python.aliases  # merge, remove-alias
        assert tree.find_keywords("Coffee") == [] and tree.find_keywords("Rust") != []
        assert {op.kind for op in tree.history()} == {"compact"}  # compact folded the undo and all before it
        names = sorted(k.name for k in tree.get_children("root"))
    for other in ("memory-restored", "memory-copy", "memory-moved"):  # restore, import of the export, migrate
        with KeywordTree(tmp_path / other, read_only=True) as tree:
            assert sorted(k.name for k in tree.get_children("root")) == names
