"""Git-versioned memory directories (kwtree.ops.git): setup, the merge of log segments, and real
``git`` merges of two clones.

Every git command is the real binary, isolated from the user's and the system's config
(``GIT_CONFIG_GLOBAL`` / ``GIT_CONFIG_SYSTEM`` point at /dev/null, a fixed identity, and a
ceiling directory so no repository outside the test's own is found). Clones are local paths:
nothing touches the network. The merge driver that git runs is this Python's ``-m kwtree
merge-driver``, a real subprocess.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest
from helpers import copy_tree_dir, log_bytes, snapshot
from hypothesis import given, note
from hypothesis import strategies as st
from test_properties import (
    CONFLICTS,
    FORK_STEP,
    apply_fork_step,
    build_base,
    split_operations,
    write_merged,
)

from kwtree import (
    ROOT_ID,
    CorruptLogError,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
)
from kwtree.cli.main import main
from kwtree.engine.events import with_checksum
from kwtree.ops import git as kwgit
from kwtree.testing import assert_tree_shape

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """git (and the merge drivers it starts) read no user or system config and find no
    repository above ``tmp_path``."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "kwtree tests")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "tests@kwtree.invalid")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)


def git(cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if ok:
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def new_tree(path: Path, names: tuple[str, ...] = ("x", "y"), **options) -> dict[str, str]:
    with KeywordTree(path, durability="none", **options) as tree:
        return {name: tree.create_keyword(name, llm_auto_place=False).id for name in names}


def segments(memory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((memory / "log").glob("*.jsonl"))}


def op_ids(data: bytes) -> list[str]:
    return [op_id for op_id, _, _ in split_operations(data)]


def without_note(merged: bytes, base: bytes) -> bytes:
    """The merged segment without the ``merge`` note the driver adds where both sides wrote,
    after checking that note: it follows the base's newest operation and names both heads."""
    notes = [(op_id, rows) for op_id, rows, _ in split_operations(merged) if b'"entity":"note"' in rows]
    assert len(notes) <= 1
    if not notes:
        return merged
    row = orjson.loads(notes[0][1])
    assert row["end"]["kind"] == "merge" and row["end"]["actor"] == "git"
    newest = max(split_operations(base))[1]
    assert row["end"]["prev"] == hashlib.sha256(newest[:newest.rindex(b',"crc":')] + b"}}\n").hexdigest()
    merge = row["end"]["audit"]["merge"]
    assert merge["base"] == row["end"]["prev"] and len(merge["heads"]) == 2
    return merged.replace(notes[0][1], b"")


# --- setup -------------------------------------------------------------------------------------


def test_setup_makes_a_repository_of_a_lone_directory_and_is_idempotent(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    new_tree(memory)
    done = kwgit.setup(memory)
    assert done.initialized and done.repository == memory.resolve() == done.directory
    assert done.changed == (".gitignore", ".gitattributes", "merge.kwtree.name", "merge.kwtree.driver")
    assert (memory / ".git").is_dir()
    assert git(memory, "config", "--local", "--get", "merge.kwtree.driver").stdout.strip() == kwgit.driver_command()
    assert kwgit.driver_command().startswith(f"{sys.executable} -m kwtree merge-driver %O %A %B")
    segment = next(iter(segments(memory)))
    attrs = git(memory, "check-attr", "merge", "text", "--", f"log/{segment}", "manifest.json").stdout
    assert f"log/{segment}: merge: kwtree\nlog/{segment}: text: unset\nmanifest.json: merge: unspecified\n" in attrs

    # A writable open makes every local file; git sees only what is worth versioning.
    with KeywordTree(memory) as tree:
        tree.create_info("remember this", keyword_ids=[ROOT_ID])
    local = ["quarantine/seg.0.torn", "log.compacting/a.jsonl", "log.compacted/a.jsonl", "log.old/a.jsonl",
             "snapshots/s.kwsnap", "before-upgrade.kwsnap", ".manifest.json.77.tmp"]
    for name in local:
        (memory / name).parent.mkdir(parents=True, exist_ok=True)
        (memory / name).write_text("local")
    shown = git(memory, "status", "--porcelain", "--untracked-files=all").stdout.splitlines()
    assert sorted(shown) == sorted(["?? .gitattributes", "?? .gitignore", "?? manifest.json",
                                    *(f"?? log/{name}" for name in segments(memory))])
    for name in ["cache", "lock", "outbox.jsonl", "outbox.lock", *local]:
        assert (memory / name).exists(), name
        assert git(memory, "check-ignore", "-q", "--", name, ok=False).returncode == 0, f"{name} is not ignored"

    before = {name: (memory / name).read_bytes() for name in (".gitignore", ".gitattributes", ".git/config")}
    again = kwgit.setup(memory)
    assert not again.initialized and again.changed == ()
    assert {name: (memory / name).read_bytes() for name in before} == before
    assert "already set up, nothing changed" in str(again)


def test_setup_in_a_project_subdirectory_keeps_existing_lines(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    memory = project / "agent" / "memory"
    new_tree(memory)
    (memory / ".gitignore").write_bytes(b"notes.txt\n/cache/")  # no final newline
    (memory / ".gitattributes").write_bytes(b"*.md text\n")
    done = kwgit.setup(memory)
    assert not done.initialized and done.repository == project.resolve()
    assert not (memory / ".git").exists()
    assert git(project, "config", "--local", "--get", "merge.kwtree.driver").stdout.strip() == kwgit.driver_command()
    ignore = (memory / ".gitignore").read_text()
    assert ignore.startswith("notes.txt\n/cache/\n") and ignore.count("/cache/") == 1
    assert all(line in ignore.splitlines() for line in kwgit.IGNORE_LINES)
    assert (memory / ".gitattributes").read_text() == "*.md text\n" + "".join(f"{x}\n" for x in kwgit.ATTRIBUTE_LINES)
    # The attributes apply below the memory directory only.
    attrs = git(project, "check-attr", "merge", "--", "agent/memory/log/a.jsonl", "log/a.jsonl").stdout
    assert attrs == "agent/memory/log/a.jsonl: merge: kwtree\nlog/a.jsonl: merge: unspecified\n"
    assert git(project, "check-ignore", "-q", "agent/memory/notes.txt", ok=False).returncode == 0

    # A moved Python (another venv) is the one thing a second run changes.
    git(project, "config", "--local", "merge.kwtree.driver", "/old/venv/bin/python -m kwtree merge-driver %O %A %B")
    files = {name: (memory / name).read_bytes() for name in (".gitignore", ".gitattributes")}
    assert kwgit.setup(memory).changed == ("merge.kwtree.driver",)
    assert {name: (memory / name).read_bytes() for name in files} == files
    assert git(project, "config", "--get", "merge.kwtree.driver").stdout.strip() == kwgit.driver_command()


def test_setup_refuses_what_it_cannot_version_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(NotFoundError, match="kwtree init"):
        kwgit.setup(tmp_path / "missing")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    with pytest.raises(NotFoundError, match="not a kwtree directory"):
        kwgit.setup(plain)
    assert [p.name for p in plain.iterdir()] == ["notes.txt"]
    with pytest.raises(InvalidInputError, match="must be a path"):
        kwgit.setup(42)  # type: ignore[arg-type]

    # A project that ignores the memory's log: setup refuses before writing anything.
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / ".gitignore").write_text("*.jsonl\n")
    memory = project / "memory"
    new_tree(memory)
    listing = sorted(p.name for p in memory.iterdir())
    with pytest.raises(InvalidInputError, match=r"ignores files of .*\*\.jsonl"):
        kwgit.setup(memory)
    assert sorted(p.name for p in memory.iterdir()) == listing
    assert git(project, "config", "--get", "merge.kwtree.driver", ok=False).returncode == 1

    # The same for a lone directory whose user-wide excludes ignore the log: the repository
    # setup made for it is removed again.
    lone = tmp_path / "lone"
    new_tree(lone)
    excludes = tmp_path / "excludes"
    excludes.write_text("log/\n")
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\texcludesFile = {excludes}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    listing = sorted(p.name for p in lone.iterdir())
    with pytest.raises(InvalidInputError, match="ignores files"):
        kwgit.setup(lone)
    assert sorted(p.name for p in lone.iterdir()) == listing


# --- the merge of one segment ------------------------------------------------------------------


def forked_logs(tmp_path: Path) -> tuple[bytes, bytes, bytes, dict[str, str]]:
    """(base, ours, theirs) log bytes of two forks of one tree, each with its own writes."""
    ids = new_tree(tmp_path / "base", ("x", "y", "k"))
    forks = {name: copy_tree_dir(tmp_path / "base", tmp_path / name) for name in "AB"}
    with KeywordTree(forks["A"], durability="none") as a, KeywordTree(forks["B"], durability="none") as b:
        a.move_keyword(ids["x"], ids["y"])
        b.move_keyword(ids["y"], ids["x"])
        a.update_keyword(ids["k"], {"name": "k-a"}, 1)
        b.update_keyword(ids["k"], {"name": "k-b"}, 1)
        a.create_info("only in A", keyword_ids=[ids["k"]])
    return log_bytes(tmp_path / "base"), log_bytes(forks["A"]), log_bytes(forks["B"]), ids


def test_merge_segments_is_the_sorted_union_of_whole_operations(tmp_path: Path) -> None:
    base, ours, theirs, _ = forked_logs(tmp_path)
    merged = kwgit.merge_segments(base, ours, theirs)
    assert merged == kwgit.merge_segments(base, theirs, ours)
    ops = {op_id: rows for op_id, rows, _ in split_operations(ours) + split_operations(theirs)}
    assert len(ops) == len(op_ids(base)) + 3 + 2
    assert without_note(merged, base) == b"".join(ops[op_id] for op_id in sorted(ops)) != merged
    # Copies and any order inside a side make no difference; nor does trailing zero padding.
    reordered = b"".join(rows for _, rows, _ in reversed(split_operations(theirs))) + theirs
    assert kwgit.merge_segments(base, ours + bytes(4096), reordered) == merged
    assert kwgit.merge_segments(b"", merged, merged) == merged
    # A torn operation in the base does not matter (both sides have moved on from it).
    assert kwgit.merge_segments(base + b'{"op":"', ours, theirs) == merged


@pytest.mark.parametrize("case", ["torn ours", "torn theirs", "after padding", "same id, other rows",
                                  "base op lost"])
def test_merge_segments_refuses_to_lose_or_invent_data(tmp_path: Path, case: str) -> None:
    base, ours, theirs, _ = forked_logs(tmp_path)
    last_row = ours.splitlines(keepends=True)[-1]
    if case == "torn ours":
        ours += last_row[:40]
    elif case == "torn theirs":
        theirs += last_row[:-1]  # a whole row but no newline: not known to be complete
    elif case == "after padding":
        ours += bytes(10) + b"x"
    elif case == "same id, other rows":
        other = last_row.replace(b'"k-a"', b'"k-z"')
        if b',"crc":' in other:  # checksummed afresh: other rows, not a damaged copy (CorruptLogError)
            other = with_checksum(other[: other.rfind(b',"crc":')] + b"}}\n")
        theirs += other
    else:
        first = split_operations(base)[1][1]
        ours = ours.replace(first, b"")
    messages = {"torn ours": "incomplete operation", "torn theirs": "incomplete operation",
                "after padding": "after its zero padding", "same id, other rows": "different rows",
                "base op lost": "rewritten"}
    with pytest.raises(kwgit.MergeConflictError, match=messages[case]):
        kwgit.merge_segments(base, ours, theirs, path="log/s.jsonl")


def test_merge_segments_checks_its_input(tmp_path: Path) -> None:
    base, ours, theirs, _ = forked_logs(tmp_path)
    with pytest.raises(CorruptLogError, match=r"s\.jsonl \(theirs\):3: unreadable row") as caught:
        kwgit.merge_segments(base, ours, b"\n".join(theirs.split(b"\n")[:2] + [b"garbage"] + theirs.split(b"\n")[2:]),
                             path="s.jsonl")
    assert caught.value.line == 3
    with pytest.raises(InvalidInputError, match="theirs must be the bytes"):
        kwgit.merge_segments(base, ours, theirs.decode())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="path must be a string"):
        kwgit.merge_segments(base, ours, theirs, path=1)  # type: ignore[arg-type]


def test_merge_files_rewrites_ours_only_when_it_changes_and_never_on_failure(tmp_path: Path) -> None:
    base, ours, theirs, _ = forked_logs(tmp_path)
    files = {name: tmp_path / f"{name}.jsonl" for name in ("base", "ours", "theirs")}
    for name, data in (("base", base), ("ours", ours), ("theirs", theirs)):
        files[name].write_bytes(data)
    inode = files["ours"].stat().st_ino
    summary = kwgit.merge_files(files["base"], files["ours"], files["theirs"], path="log/s.jsonl")
    assert summary == kwgit.MergeSummary("log/s.jsonl", len(op_ids(base)) + 5 + 1, 3, 2, True)  # (and the note)
    assert files["ours"].read_bytes() == kwgit.merge_segments(base, ours, theirs)
    assert files["ours"].stat().st_ino != inode  # replaced by a rename, not rewritten in place
    merged = files["ours"].read_bytes()
    inode = files["ours"].stat().st_ino
    again = kwgit.merge_files(files["base"], files["ours"], files["theirs"])
    assert not again.written and again.only_theirs == 0 and files["ours"].stat().st_ino == inode
    files["theirs"].write_bytes(theirs + b'{"op":')
    with pytest.raises(kwgit.MergeConflictError):
        kwgit.merge_files(files["base"], files["ours"], files["theirs"])
    assert files["ours"].read_bytes() == merged
    with pytest.raises(NotFoundError, match="theirs file"):
        kwgit.merge_files(files["base"], files["ours"], tmp_path / "nope")
    with pytest.raises(InvalidInputError, match="is a directory"):
        kwgit.merge_files(files["base"], tmp_path, files["theirs"])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp file left


def test_cli_git_init_and_merge_driver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    memory = tmp_path / "memory"
    new_tree(memory)
    assert main(["git", "init", str(memory)]) == 0
    assert "in a new repository: updated .gitignore" in capsys.readouterr().out
    assert main(["git", "init", str(memory)]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert main(["git", "init", str(tmp_path / "nope")]) == 1
    assert "is not a kwtree directory" in capsys.readouterr().err
    assert main(["git", "push", str(memory)]) == 2
    capsys.readouterr()

    base, ours, theirs, _ = forked_logs(tmp_path)
    for name, data in (("base", base), ("ours", ours), ("theirs", theirs + b"{")):
        (tmp_path / f"{name}.jsonl").write_bytes(data)
    args = [str(tmp_path / f"{name}.jsonl") for name in ("base", "ours", "theirs")]
    assert main(["merge-driver", *args, "--path", "log/s.jsonl"]) == 1
    assert "error: log/s.jsonl (theirs) ends with an incomplete operation" in capsys.readouterr().err
    assert (tmp_path / "ours.jsonl").read_bytes() == ours
    (tmp_path / "theirs.jsonl").write_bytes(theirs)
    assert main(["merge-driver", *args]) == 0
    total = len(op_ids(kwgit.merge_segments(base, ours, theirs)))
    assert capsys.readouterr().out == f"merged {args[1]}: {total} operation(s), 3 only in ours, 2 only in theirs\n"
    assert (tmp_path / "ours.jsonl").read_bytes() == kwgit.merge_segments(base, ours, theirs)


def test_exported_names() -> None:
    assert sorted(kwgit.__all__) == [
        "ATTRIBUTE_LINES", "DRIVER_NAME", "GitError", "GitSetup", "IGNORE_LINES", "MergeConflictError",
        "MergeSummary", "driver_command", "merge_files", "merge_segments", "setup",
    ]


# --- real git merges of two clones -------------------------------------------------------------


def filler(tree: KeywordTree, keyword_id: str, side: str, count: int) -> list[str]:
    """Infos long enough to make the log rotate to new segments (segment_bytes=4096)."""
    return [tree.create_info(f"{side} note {n}: " + "lorem ipsum " * 20, keyword_ids=[keyword_id]).id
            for n in range(count)]


@pytest.mark.parametrize("layout", ["project subdirectory", "repository root"])
def test_two_clones_merge_without_conflict_into_one_tree(tmp_path: Path, layout: str) -> None:
    origin = tmp_path / "origin"
    if layout == "project subdirectory":
        origin.mkdir()
        git(origin, "init", "-q", "-b", "main")
        (origin / "agent.py").write_text("print('agent')\n")
        inside = "memory"
    else:
        inside = "."
    ids = new_tree(origin / inside, ("x", "y", "k", "p", "q"), segment_bytes=4096)
    with KeywordTree(origin / inside, durability="none") as tree:
        info = tree.create_info("shared memo", keyword_ids=[ids["q"]]).id
    kwgit.setup(origin / inside)
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "memory")
    base_commit = git(origin, "rev-parse", "HEAD").stdout.strip()
    base_segments = segments(origin / inside)
    assert len(base_segments) == 1

    clones = {}
    for side in "ab":
        clone = tmp_path / f"clone-{side}"
        git(tmp_path, "clone", "-q", str(origin), clone.name)
        # git never copies config: each clone sets the driver up once (the files came along).
        assert kwgit.setup(clone / inside).changed == ("merge.kwtree.name", "merge.kwtree.driver")
        git(clone, "switch", "-q", "-c", side)
        clones[side] = clone

    # Interleaved writes, so the op ids of the two branches interleave too.
    with (KeywordTree(clones["a"] / inside, durability="none") as a,
          KeywordTree(clones["b"] / inside, durability="none") as b):
        move_a = a.move_keyword(ids["x"], ids["y"]).op_id  # x under y ...
        move_b = b.move_keyword(ids["y"], ids["x"]).op_id  # ... and y under x: together a cycle
        name_a = a.update_keyword(ids["k"], {"name": "k-a"}, 1).op_id
        name_b = b.update_keyword(ids["k"], {"name": "k-b", "description": "from b"}, 1).op_id
        a.delete_keyword(ids["p"])
        child = b.create_keyword("child", ids["p"]).id
        b.link_info(info, ids["p"])
        notes = filler(a, ids["q"], "a", 12) + filler(b, ids["q"], "b", 12)
        a.update_info(info, {"content": "memo edited in a"})
    for side, clone in clones.items():
        git(clone, "add", "-A")
        changes = git(clone, "diff", "--cached", "--name-status", base_commit).stdout.splitlines()
        shared = f"M\t{Path(inside, 'log', next(iter(base_segments))).as_posix()}"
        assert shared in changes, changes  # both branches appended to the same segment ...
        assert sum(line.startswith("A\t") for line in changes) >= 1, changes  # ... and rotated
        assert all(line == shared or line.startswith(f"A\t{Path(inside, 'log').as_posix()}/") for line in changes)
        git(clone, "commit", "-q", "-m", f"writes on {side}")

    for here, there in (("a", "b"), ("b", "a")):  # fetch both first: no merge may fast-forward
        git(clones[here], "fetch", "-q", str(clones[there]), f"{there}:{there}")
    for here, there in (("a", "b"), ("b", "a")):
        merged = git(clones[here], "merge", "--no-edit", there, ok=False)
        assert merged.returncode == 0, merged.stdout + merged.stderr
        assert "merged " in merged.stdout  # the kwtree driver merged the shared segment
        assert git(clones[here], "status", "--porcelain").stdout == ""  # no conflict, nothing stray
    # Whichever branch merged into the other, the merged files are the same, byte for byte.
    assert git(clones["a"], "rev-parse", "HEAD^{tree}").stdout == git(clones["b"], "rev-parse", "HEAD^{tree}").stdout
    for data in segments(clones["a"] / inside).values():
        assert op_ids(data) == sorted(set(op_ids(data)))  # each operation once, in op-id order

    snaps = []
    kids = [ROOT_ID, *ids.values(), child]
    for clone in clones.values():
        with KeywordTree(clone / inside, read_only=True) as view:
            assert_tree_shape(view, kids, [info, *notes])
            parents = (view.get_keyword(ids["x"]).parent_id, view.get_keyword(ids["y"]).parent_id)
            if move_a < move_b:  # the later move would close a cycle: it is skipped
                assert parents == (ids["y"], ROOT_ID)
            else:
                assert parents == (ROOT_ID, ids["x"])
            assert view.get_keyword(ids["k"]).name == ("k-b" if name_b > name_a else "k-a")
            assert [k.id for k in view.get_path(child)] == [ROOT_ID, child]  # its parent p was deleted in a
            assert view.get_info(info).content == "memo edited in a"
            assert len(view.get_infos_of_keyword(ids["q"], None, 0, 100)) == 25
            snaps.append(snapshot(view, kids, [info, *notes]))
    assert snaps[0] == snaps[1]

    # The merged directory takes new writes and reopens to them.
    with KeywordTree(clones["a"] / inside) as tree:
        after = tree.create_keyword("after the merge", ids["q"]).id
    with KeywordTree(clones["a"] / inside, read_only=True) as view:
        assert [k.id for k in view.get_path(after)] == [ROOT_ID, ids["q"], after]


def test_git_reports_a_conflict_when_a_branch_has_a_torn_operation(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    ids = new_tree(memory)
    kwgit.setup(memory)
    git(memory, "add", "-A")
    git(memory, "commit", "-q", "-m", "memory")
    git(memory, "branch", "-q", "-M", "main")
    git(memory, "branch", "-q", "other")
    with KeywordTree(memory, durability="none") as tree:
        tree.create_keyword("on main", ids["x"])
    git(memory, "commit", "-q", "-am", "main writes")
    git(memory, "switch", "-q", "other")
    with KeywordTree(memory, durability="none") as tree:
        tree.create_keyword("on other", ids["y"])
    (segment,) = (memory / "log").glob("*.jsonl")
    torn = segment.read_bytes() + b'{"op":"' + b"f" * 32 + b'","entity":"keyword"'  # a writer died here
    segment.write_bytes(torn)
    git(memory, "commit", "-q", "-am", "other writes, then a crash")
    merged = git(memory, "merge", "--no-edit", "main", ok=False)
    assert merged.returncode != 0
    assert "ends with an incomplete operation" in merged.stdout + merged.stderr
    assert git(memory, "diff", "--name-only", "--diff-filter=U").stdout == f"log/{segment.name}\n"
    assert segment.read_bytes() == torn  # our side is kept as it was, nothing dropped
    git(memory, "merge", "--abort")


# --- the merge as a property over random forks (no git) -----------------------------------------


def shuffled_copy(data: bytes, draw, label: str) -> bytes:
    """The same whole operations in a drawn order, some of them twice (as an earlier merge
    by hand might leave them)."""
    ops = [rows for _, rows, _ in split_operations(data)]
    order = draw(st.permutations(ops), label=label)
    extra = draw(st.lists(st.sampled_from(ops), max_size=3), label=f"{label} copies") if ops else []
    return b"".join(order + extra)


@pytest.mark.slow
@given(random_steps=st.lists(FORK_STEP, max_size=12), data=st.data())
def test_merge_driver_output_replays_like_any_union(random_steps, data) -> None:
    """For random forks, merge(base, A, B) equals merge(base, B, A) byte for byte, holds each
    operation once in op-id order, and replays to the state the plain (unsorted) union of the
    two logs replays to, whatever the order of operations inside the inputs (DESIGN §4.3)."""
    work = Path(tempfile.mkdtemp(prefix="kwtree-gitmerge-"))
    try:
        kids, iids = build_base(work / "base")
        forks = {name: copy_tree_dir(work / "base", work / name) for name in "AB"}
        known = {name: (list(kids), list(iids)) for name in "AB"}
        trees = {name: KeywordTree(path, durability="none") for name, path in forks.items()}
        try:
            for fork, action, x, y, z in data.draw(st.permutations(CONFLICTS + random_steps), label="steps"):
                apply_fork_step(trees[fork], *known[fork], action, x, y, z)
        finally:
            for tree in trees.values():
                tree.close()
        base, ours, theirs = log_bytes(work / "base"), log_bytes(forks["A"]), log_bytes(forks["B"])
        if data.draw(st.booleans(), label="shuffle inputs"):
            base = shuffled_copy(base, data.draw, "base")
            ours = shuffled_copy(ours, data.draw, "ours")
            theirs = shuffled_copy(theirs, data.draw, "theirs")
        merged = kwgit.merge_segments(base, ours, theirs)
        assert merged == kwgit.merge_segments(base, theirs, ours)
        union = {op_id: (op_id, rows, 0) for op_id, rows, _ in split_operations(ours) + split_operations(theirs)}
        assert without_note(merged, base) == b"".join(union[op_id][1] for op_id in sorted(union))
        note(f"{len(union)} operations")
        plain = [*split_operations(ours), *split_operations(theirs)]  # no sort, copies kept
        all_kids = list(dict.fromkeys(known["A"][0] + known["B"][0]))
        all_iids = list(dict.fromkeys(known["A"][1] + known["B"][1]))
        snaps = []
        for n, ops in enumerate((split_operations(merged), plain)):
            with KeywordTree(write_merged(work / f"merged-{n}", forks["A"], ops), read_only=True) as view:
                assert_tree_shape(view, all_kids, all_iids)
                snaps.append(snapshot(view, all_kids, all_iids))
        assert snaps[0] == snaps[1]
        assert orjson.loads(merged.splitlines()[0])["entity"] == "keyword"  # the root's creation first
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_merge_of_older_operations_reaches_the_full_text_index(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    options = {"durability": "none", "worker": False, "embed_async": False}
    with KeywordTree(ours, **options) as tree:
        tree.create_info("the common root memory")
    shutil.copytree(ours, theirs)
    base = {path.name: path.read_bytes() for path in (ours / "log").iterdir()}
    with KeywordTree(theirs, **options) as tree:
        tree.create_info("zebras graze on the savanna")  # an older op id than ours below
    with KeywordTree(ours, **options) as tree:
        tree.create_info("penguins swim in cold water")
        assert [hit.info.content for hit in tree.recall("penguins", mode="bm25")] == ["penguins swim in cold water"]
    for name, segment in base.items():
        merged = kwgit.merge_segments(segment, (ours / "log" / name).read_bytes(), (theirs / "log" / name).read_bytes())
        (ours / "log" / name).write_bytes(merged)
    with KeywordTree(ours, **options) as tree:
        assert tree.tree_metrics()["infos"] == 3
        assert [hit.info.content for hit in tree.recall("zebras", mode="bm25")] == ["zebras graze on the savanna"]
