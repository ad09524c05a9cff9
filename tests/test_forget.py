"""forget: an info, a keyword with its subtree, or a scope is erased from the live tree, from
every row of the log (every version, every before-image, the audits), from the full-text
index, the vectors and the outbox, and from what later snapshots and exports hold; the report
says what was erased, kept and out of reach. Real files, real tantivy and hnswlib, a real
second process; the strongest check reads every byte under the directory.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from helpers import dir_bytes, log_bytes

import kwtree
from kwtree import (
    ROOT_ID,
    ForgetReport,
    HashEmbedder,
    InvalidInputError,
    KeywordTree,
    NotFoundError,
    ReadOnlyError,
)
from kwtree.cli.main import main
from kwtree.memory_schema import SCOPE_KEY

SECRET = "zanzibarquux ristretto"  # the text that must vanish
WORD = "zanzibarquux"


class FailingEmbedder(HashEmbedder):
    """Refuses texts holding SECRET and quotes them in its error, as some HTTP APIs do: the
    outbox then records the text in its failed rows."""

    def embed(self, texts: list[str]) -> np.ndarray:
        for text in texts:
            if SECRET in text:
                raise ValueError(f"cannot embed {text!r}")
        return super().embed(texts)


def holders(directory: Path, text: str = WORD) -> list[str]:
    """Every file under ``directory`` whose bytes hold ``text`` (as UTF-8 or inside JSON)."""
    patterns = {text.encode(), orjson.dumps(text)[1:-1]}
    return [str(path) for path in sorted(directory.rglob("*"))
            if path.is_file() and any(pattern in path.read_bytes() for pattern in patterns)]


def segment_files(directory: Path) -> set[str]:
    """The names of the full-text index's segment files (tantivy names them by segment id)."""
    return {path.name for path in (directory / "cache" / "fulltext" / "index").glob("*.*")
            if not path.name.startswith(".") and path.suffix not in (".json", ".lock")}


def live_view(tree: KeywordTree) -> dict[str, Any]:
    """Every live keyword, info, link and relation with its fields (ids, texts, structure)."""
    keywords, infos, links, relations = {}, {}, set(), set()
    stack = [ROOT_ID]
    while stack:
        kid = stack.pop()
        keyword = tree.get_keyword(kid)
        keywords[kid] = (keyword.name, keyword.parent_id, keyword.aliases, keyword.description,
                         dict(keyword.metadata))
        for info in tree.get_infos_of_keyword(kid, size=10_000):
            infos[info.id] = (info.content, info.source, dict(info.metadata))
            links.add((info.id, kid))
        for rel in tree.get_relations(kid):
            relations.add((rel.from_id, rel.to_id, rel.type, rel.reason))
        stack.extend(child.id for child in tree.get_children(kid))
    return {"keywords": keywords, "infos": infos, "links": links, "relations": relations}


def scope_of(tree: KeywordTree, path: str, parent: str = ROOT_ID) -> str:
    name = path.rsplit("/", 1)[-1]
    return tree.create_keyword(name, parent_id=parent, metadata={SCOPE_KEY: path}).id


def secret_tree(directory: Path, **options: Any) -> tuple[KeywordTree, dict[str, str]]:
    """A tree in which SECRET is everywhere: an info's content (two versions), source and
    metadata, a keyword's name, alias and description, a relation's reason, an agent audit
    (auto_link), the full-text index, the vectors, and a failed outbox row."""
    tree = KeywordTree(directory, durability="none", embedder=FailingEmbedder(64), worker=False, **options)
    alice = scope_of(tree, "user:alice")
    bob = scope_of(tree, "user:bob")
    drinks = tree.create_keyword(f"{WORD} drinks", parent_id=alice, aliases=[f"{WORD} coffee"],
                                 description=f"what {SECRET} means", metadata={"note": SECRET})
    other = tree.create_keyword("Weather", parent_id=bob)
    info = tree.create_info(f"Alice orders a {SECRET} at nine", source=f"chat about {WORD}",
                            keyword_ids=[drinks.id], metadata={"said": SECRET})
    tree.update_info(info.id, {"content": f"Alice orders two {SECRET} at nine"})
    linked = tree.create_info(f"Alice asked for a {WORD} double shot", keyword_ids=[drinks.id], auto_link=True)
    shared = tree.create_info("Rain is forecast for Tuesday", keyword_ids=[drinks.id, other.id])
    tree.relate(drinks.id, other.id, reason=f"both about {SECRET}")
    assert tree.recall(WORD)  # the full-text index holds it
    tree.wait_indexed(timeout=0.5)  # one round: the failing embedder's error lands in the outbox
    assert WORD in orjson.dumps(dict(tree.history(linked.id)[0].audit or {})).decode()  # the agent's record
    return tree, {"alice": alice, "bob": bob, "drinks": drinks.id, "other": other.id, "info": info.id,
                  "linked": linked.id, "shared": shared.id}


# --- erasing -------------------------------------------------------------------------------------


def test_forgetting_a_scope_leaves_no_byte_of_its_text_under_the_directory(tree_dir: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    assert any(path.endswith("outbox.jsonl") for path in holders(tree_dir))
    assert any("/log/" in path for path in holders(tree_dir))
    # tantivy's term dictionary does not keep a term's bytes together (a grep cannot see it),
    # and a deleted document stays in its segment until a merge: every segment must go.
    segments = segment_files(tree_dir)
    assert segments
    report = tree.forget(scope="user:alice")
    assert isinstance(report, ForgetReport) and report.op_id == tree.last_op_id
    assert set(report.infos) == {ids["info"], ids["linked"]}
    assert set(report.keywords) == {ids["alice"], ids["drinks"]}
    assert [(kept.info_id, kept.keyword_ids) for kept in report.kept] == [(ids["shared"], (ids["other"],))]
    assert report.relations == 1 and report.log_rewritten and report.rows_rewritten >= 8
    assert report.audits_scrubbed >= 1 and report.outbox_items_dropped >= 1
    assert holders(tree_dir) == []
    # Reads and caches rebuilt after it find nothing either, and nothing comes back on disk.
    assert not {hit.info.id for hit in tree.recall(WORD)} & {ids["info"], ids["linked"]}
    assert tree.find_keywords(f"{WORD} drinks") == []
    tree.wait_indexed(timeout=0.5)
    tree.close()
    assert holders(tree_dir) == []
    assert segment_files(tree_dir) and not segment_files(tree_dir) & segments
    assert kwtree.verify_directory(tree_dir).ok


def test_vector_rows_of_a_forgotten_info_are_zeroed_and_lose_their_hash(tree_dir: Path) -> None:
    tree = KeywordTree(tree_dir, durability="none", worker=False, embed_async=False, embedder=HashEmbedder(64))
    gone = tree.create_info(f"{SECRET} is the secret")
    kept = tree.create_info("an ordinary memory about tea")
    report = tree.forget(gone.id)
    assert report.vectors_blanked == 1
    store = next((tree_dir / "cache" / "vectors").iterdir())
    keys = [orjson.loads(line)[:2] for line in (store / "keys.jsonl").read_bytes().splitlines()]
    rows = np.fromfile(store / "vectors.f32", dtype=np.float32).reshape(len(keys), 64)
    by_id = {entity_id: (digest, rows[n]) for n, (entity_id, digest) in enumerate(keys)}
    assert set(by_id[gone.id][0]) == {"0"} and not by_id[gone.id][1].any()
    assert set(by_id[kept.id][0]) != {"0"} and by_id[kept.id][1].any()
    assert not (store / "hnsw.bin").exists()
    assert [hit.info.id for hit in tree.recall("ordinary memory tea", mode="vector")] == [kept.id]
    tree.close()
    assert kwtree.verify_directory(tree_dir).ok  # an erased row matches the check its line records


def test_history_keeps_every_operation_without_the_text_and_as_of_sees_tombstones(tree_dir: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    before = [(op.op_id, op.kind) for op in tree.history(ids["info"])]
    created = before[0][0]
    report = tree.forget(ids["info"])
    after = tree.history(ids["info"])
    assert [(op.op_id, op.kind) for op in after] == [*before, (report.op_id, "forget")]
    for op in after:
        for change in op.changes:
            for version in (change.after, change.before):
                if isinstance(version, kwtree.Info) and version.id == ids["info"]:
                    assert (version.content, version.source) == ("", "")
                    assert dict(version.metadata) == {"forgotten_by": report.op_id}
    view = KeywordTree(tree_dir, as_of=created)
    old = view.get_info(ids["info"])  # live then, and a tombstone now
    assert (old.content, dict(old.metadata)) == ("", {"forgotten_by": report.op_id})
    view.close()
    with pytest.raises(NotFoundError):
        tree.get_info(ids["info"])
    tree.close()


def test_a_keyword_subtree_goes_like_a_cascading_delete_of_its_own_infos(tree_dir: Path, tmp_path: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    tree.close()
    twin_dir = shutil.copytree(tree_dir, tmp_path / "twin", ignore=shutil.ignore_patterns("lock", "cache"))
    twin = KeywordTree(twin_dir, durability="none", worker=False)
    twin.delete_keyword(ids["drinks"], cascade=True, info_policy="delete")
    expected = live_view(twin)
    twin.close()
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    tree.forget(ids["drinks"])
    assert live_view(tree) == expected
    assert tree.get_info(ids["shared"]).content == "Rain is forecast for Tuesday"
    tree.close()
    reopened = KeywordTree(tree_dir, read_only=True)  # a replay of the rewritten log
    assert live_view(reopened) == expected
    reopened.close()
    assert kwtree.verify_directory(tree_dir).ok


def test_forgetting_one_scope_leaves_another_scope_and_its_texts_alone(tree_dir: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    bob_keyword = tree.create_keyword(f"{WORD} for bob", parent_id=ids["bob"])
    bob_info = tree.create_info(f"Bob also likes {WORD}", keyword_ids=[bob_keyword.id])
    tree.forget(scope="user:alice")
    assert tree.get_info(bob_info.id).content == f"Bob also likes {WORD}"
    assert tree.get_keyword(bob_keyword.id).name == f"{WORD} for bob"
    assert [hit.info.id for hit in tree.recall(f"bob {WORD}")][:1] == [bob_info.id]
    tree.close()


def test_a_deleted_info_is_erased_too(tree_dir: Path) -> None:
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    info = tree.create_info(f"{SECRET} deleted long ago")
    tree.delete_info(info.id)
    assert holders(tree_dir)
    report = tree.forget(info.id)
    assert report.infos == (info.id,) and holders(tree_dir) == []
    tree.close()


def test_forget_twice_finishes_and_says_it_was_forgotten_already(tree_dir: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    first = tree.forget(scope="user:alice")
    again = tree.forget(scope="user:alice")
    assert (again.op_id, again.already_forgotten_by, again.log_rewritten) == (None, first.op_id, False)
    by_id = tree.forget(ids["info"])
    assert (by_id.op_id, by_id.already_forgotten_by) == (None, first.op_id)
    assert kwtree.verify_directory(tree_dir).ok
    tree.close()


def test_a_torn_tail_holding_the_text_is_not_kept_in_quarantine(tree_dir: Path) -> None:
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    info = tree.create_info(f"{SECRET} once")
    tree.close()
    segment = sorted((tree_dir / "log").glob("*.jsonl"))[-1]
    torn = orjson.dumps({"op": "f" * 32, "entity": "info", "id": info.id, "v": 2,
                         "content": f"{SECRET} again", "created_at": 1.0})
    with open(segment, "ab") as out:  # a writer killed in the middle of its operation
        out.write(torn + b"\n" + torn[:20])
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    report = tree.forget(info.id)
    assert len(report.quarantine_removed) == 1
    assert holders(tree_dir) == []
    tree.close()


# --- what it cannot reach ------------------------------------------------------------------------


def test_snapshots_taken_before_are_listed_and_those_taken_after_hold_nothing(tree_dir: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    old = Path(tree.snapshot())
    report = tree.forget(ids["info"])
    snapshots = next(far for far in report.unreachable if far.what == "snapshots")
    assert snapshots.paths == (str(old),)
    assert {far.what for far in report.unreachable} >= {"snapshots", "exports", "copies", "open trees"}
    new = Path(tree.snapshot())
    export = tree_dir.parent / "after.json"
    tree.export(export)
    with tarfile.open(new) as archive:
        texts = [archive.extractfile(member).read() for member in archive if member.isfile()]  # type: ignore[union-attr]
    assert texts and not any(f"orders two {SECRET}".encode() in text for text in texts)
    assert f"orders two {SECRET}" not in export.read_text()
    tree.close()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_history_holding_the_log_is_named_with_how_to_purge_it(tree_dir: Path) -> None:
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    info = tree.create_info(f"{SECRET} in git")
    tree.close()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(tree_dir.parent), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "log", "manifest.json"], ["commit", "-qm", "memory"]):
        subprocess.run(["git", *args], cwd=tree_dir, check=True, env=env)
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    report = tree.forget(info.id)
    git = next(far for far in report.unreachable if far.what == "git history")
    assert git.paths == (str(tree_dir.resolve()),) and "git filter-repo" in git.how
    tree.close()


# --- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    {}, {"entity_id": "x" * 32, "scope": "user:alice"}, {"entity_id": 42}, {"entity_id": ROOT_ID},
    {"entity_id": "0" * 32}, {"scope": "alice"}, {"scope": "user:carol"}, {"scope": ["user:alice"]},
])
def test_bad_input_is_refused_and_writes_nothing(tree_dir: Path, args: dict[str, Any]) -> None:
    tree, _ = secret_tree(tree_dir)
    before = dir_bytes(tree_dir / "log")
    with pytest.raises((InvalidInputError, NotFoundError)) as raised:
        tree.forget(**args)
    assert dir_bytes(tree_dir / "log") == before
    if args.get("scope") == "user:carol":
        assert "scope" in str(raised.value) and "user:carol" in str(raised.value)
    tree.close()


def test_read_only_trees_and_views_refuse(tree_dir: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    first = tree.last_op_id
    tree.close()
    before = log_bytes(tree_dir)
    for view in (KeywordTree(tree_dir, read_only=True), KeywordTree(tree_dir, as_of=first)):
        with pytest.raises(ReadOnlyError):
            view.forget(ids["info"])
        view.close()
    assert log_bytes(tree_dir) == before


def test_undo_cannot_bring_forgotten_content_back(tree_dir: Path) -> None:
    tree, ids = secret_tree(tree_dir)
    created = tree.history(ids["info"])[0].op_id
    report = tree.forget(ids["info"])
    before = log_bytes(tree_dir)
    with pytest.raises(InvalidInputError, match="cannot be undone"):
        tree.undo(report.op_id)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="forgot"):
        tree.undo(created, force=True)
    assert log_bytes(tree_dir) == before
    tree.close()


# --- other processes -----------------------------------------------------------------------------


def test_another_process_sees_the_content_gone_after_refresh(tree_dir: Path, children) -> None:
    tree, ids = secret_tree(tree_dir)
    child = children("""
        import sys
        from kwtree import KeywordTree, NotFoundError
        tree = KeywordTree(sys.argv[1], read_only=True)
        print("content", tree.get_info(sys.argv[2]).content, flush=True)
        sys.stdin.readline()
        print("refreshed", tree.refresh(), flush=True)
        try:
            tree.get_info(sys.argv[2])
        except NotFoundError:
            print("gone", flush=True)
        print("recalled", sys.argv[2] in [hit.info.id for hit in tree.recall(sys.argv[3])], flush=True)
        texts = [change.after.content for op in tree.history(sys.argv[2]) for change in op.changes
                 if hasattr(change.after, "content")]
        print("history", sorted(set(texts)), flush=True)
    """, tree_dir, ids["info"], WORD)
    assert child.readline() == f"content Alice orders two {SECRET} at nine"
    tree.forget(ids["info"])
    child.send("go")
    assert child.readline().startswith("refreshed ")
    assert child.readline() == "gone"
    assert child.readline() == "recalled False"
    assert child.readline() == "history ['']"
    child.finish()
    tree.close()


# --- the command line ----------------------------------------------------------------------------


def test_kwtree_forget_prints_the_report(tree_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree, ids = secret_tree(tree_dir)
    tree.close()
    assert main(["forget", str(tree_dir), ids["info"]]) == 0
    out = capsys.readouterr().out
    assert f"erased info\t{ids['info']}" in out and "kwtree cannot erase these copies:" in out
    assert main(["forget", str(tree_dir), "--scope", "user:alice", "--json"]) == 0
    done = orjson.loads(capsys.readouterr().out)
    assert done["target"] == "scope user:alice" and ids["drinks"] in done["keywords"]
    assert holders(tree_dir) == []
    before = log_bytes(tree_dir)
    assert main(["forget", str(tree_dir)]) == 1
    assert main(["forget", str(tree_dir), ids["shared"], "--scope", "user:bob"]) == 1
    assert main(["forget", str(tree_dir), "--scope", "user:carol"]) == 1
    assert "user:carol" in capsys.readouterr().err
    assert log_bytes(tree_dir) == before


def test_the_embedding_worker_thread_never_stores_a_vector_of_forgotten_text(tree_dir: Path) -> None:
    tree = KeywordTree(tree_dir, durability="none", embedder=HashEmbedder(64))  # the worker thread runs
    infos = tree.batch_create_infos([{"content": f"{SECRET} number {n}"} for n in range(200)])
    report = tree.forget(infos[0].id)  # while the worker embeds the batch
    tree.batch_create_infos([{"content": f"later memory {n}"} for n in range(50)])
    assert tree.wait_indexed(timeout=60)
    tree.close()
    store = next((tree_dir / "cache" / "vectors").iterdir())
    keys = [orjson.loads(line)[:2] for line in (store / "keys.jsonl").read_bytes().splitlines()]
    assert [digest for entity_id, digest in keys if entity_id == infos[0].id] in ([], ["0" * len(keys[0][1])])
    assert len(keys) >= 249 and report.infos == (infos[0].id,)  # every other text is embedded


def test_the_python_example_of_the_docs_runs_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "agent-memory.md").read_text()
    section = text.split("## Forget\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "agent-memory.md", "exec"), {})  # the docs' own example
    assert "4242" in code and holders(tmp_path / "memory", "4242") == []


# --- keyword abstracts copy memories' sentences: forget reaches them too --------------------------


def abstracted_secret(directory: Path) -> tuple[KeywordTree, dict[str, str]]:
    """SECRET in an info under Drinks, under a scope holding a memory of its own; both keywords'
    abstracts built twice (so older abstract versions holding SECRET stay in the log)."""
    tree = KeywordTree(directory, durability="none", worker=False)
    alice = scope_of(tree, "user:alice")
    drinks = tree.create_keyword("Drinks", parent_id=alice, llm_auto_place=False)
    tree.create_info("Alice lives in Lisbon near the river.", keyword_ids=[alice])
    info = tree.create_info(f"Alice orders a {SECRET} every morning.", keyword_ids=[drinks.id])
    tree.abstracts()
    tree.create_info("Alice drinks green tea in the afternoon.", keyword_ids=[drinks.id])
    tree.abstracts()
    assert all(SECRET in tree.get_keyword(kid).metadata["kwtree:abstract"]["overview"] for kid in (alice, drinks.id))
    return tree, {"alice": alice, "drinks": drinks.id, "info": info.id}


def test_forgetting_an_info_erases_the_abstracts_that_copied_it(tree_dir: Path) -> None:
    tree, ids = abstracted_secret(tree_dir)
    report = tree.forget(ids["info"])
    for kid in (ids["alice"], ids["drinks"]):  # the live keywords stay, without the stale abstract
        assert "kwtree:abstract" not in tree.get_keyword(kid).metadata
    assert set(report.abstracts_dropped) == {ids["alice"], ids["drinks"]}
    tree.close()
    assert holders(tree_dir) == []
    with KeywordTree(tree_dir, worker=False) as again:  # rebuilt from what is left
        rebuilt = {item.keyword_id: item for item in again.abstracts()}
        assert rebuilt[ids["drinks"]].built and "green tea" in rebuilt[ids["drinks"]].overview
        assert WORD not in orjson.dumps([item.overview for item in rebuilt.values()]).decode()
    assert kwtree.verify_directory(tree_dir).ok


def test_an_abstract_holding_the_text_after_the_info_moved_away_is_erased_too(tree_dir: Path) -> None:
    tree, ids = abstracted_secret(tree_dir)
    elsewhere = tree.create_keyword("Elsewhere", parent_id=ROOT_ID, llm_auto_place=False)
    tree.link_info(ids["info"], elsewhere.id)
    tree.unlink_info(ids["info"], ids["drinks"])  # Drinks' abstract is stale and still quotes it
    assert SECRET in tree.get_keyword(ids["drinks"]).metadata["kwtree:abstract"]["overview"]
    report = tree.forget(ids["info"])
    assert {ids["alice"], ids["drinks"]} <= set(report.abstracts_dropped)
    tree.close()
    assert holders(tree_dir) == []


def test_an_abstract_quoting_an_older_version_of_a_moved_info_is_erased_by_a_second_step(tree_dir: Path) -> None:
    tree, ids = abstracted_secret(tree_dir)
    tree.update_info(ids["info"], {"content": "Alice orders a flat white every morning."})
    elsewhere = tree.create_keyword("Elsewhere", parent_id=ROOT_ID, llm_auto_place=False)
    tree.link_info(ids["info"], elsewhere.id)
    tree.unlink_info(ids["info"], ids["drinks"])  # Drinks' abstract quotes a text no live info holds
    ops_before = len(tree.history())
    report = tree.forget(ids["info"])
    # The forget operation could not know (it sees live texts); the log rewrite found the quote
    # in the live abstract and a second forget operation dropped it before the rewrite.
    assert ids["drinks"] in report.abstracts_dropped
    assert "kwtree:abstract" not in tree.get_keyword(ids["drinks"]).metadata
    assert [op.kind for op in tree.history()[ops_before:]] == ["forget", "forget"]
    tree.close()
    assert holders(tree_dir) == []
    assert kwtree.verify_directory(tree_dir).ok


def test_a_forgotten_keyword_merged_into_another_leaves_no_alias_there(tree_dir: Path) -> None:
    tree = KeywordTree(tree_dir, durability="none", worker=False)
    ex = tree.create_keyword(f"{WORD} Bob", parent_id=ROOT_ID, aliases=[f"{WORD} B"], llm_auto_place=False)
    bob = tree.create_keyword("Bob", parent_id=ROOT_ID, llm_auto_place=False)
    tree.create_info("Bob fixes bikes.", keyword_ids=[ex.id])
    tree.merge_keywords(ex.id, bob.id)  # the merged keyword's name and alias become Bob's aliases
    assert any(WORD in alias for alias in tree.get_keyword(bob.id).aliases)
    tree.update_keyword(bob.id, {"description": "a friend"}, tree.get_keyword(bob.id).version)  # another version
    other = tree.create_keyword("Robert", parent_id=ROOT_ID, aliases=[f"{WORD} Bob"], llm_auto_place=False)
    report = tree.forget(ex.id)
    assert tree.get_keyword(bob.id).aliases == () and report.aliases_dropped == (bob.id,)
    # A keyword that merely shares the name (no merge gave it) keeps its alias: forget never
    # reaches past what the forgotten keyword became.
    assert tree.get_keyword(other.id).aliases == (f"{WORD} Bob",)
    assert tree.get_keyword(bob.id).description == "a friend"  # the rest of Bob stays
    assert [i.content for i in tree.get_infos_of_keyword(bob.id)] == ["Bob fixes bikes."]  # kept: Bob holds it
    tree.forget(other.id)  # (the bystander's own copy of the words, so that none is left on disk)
    tree.close()
    assert holders(tree_dir) == []
    assert kwtree.verify_directory(tree_dir).ok
