"""The on-disk format: rows, key order, defaults, end markers, op ids, segments, manifest."""

from __future__ import annotations

import orjson
import pytest
from helpers import snapshot

from kwtree import KeywordTree, RelationType
from kwtree import __all__ as public_names
from kwtree.engine.events import OpClock, encode_operation, is_op_id
from kwtree.models import EMPTY_METADATA, Change, Keyword, Operation


def rows(tree_dir):
    return [orjson.loads(line) for seg in sorted((tree_dir / "log").glob("*.jsonl"))
            for line in seg.read_bytes().rstrip(b"\0").splitlines()]


def test_rows_have_a_fixed_key_order_and_omit_defaults(tree, tree_dir):
    a = tree.create_keyword("A", llm_auto_place=False)  # no agent decision, so no audit
    tree.update_keyword(a.id, {"aliases": ["x"], "description": "d", "metadata": {"m": 1}}, version=1)
    info = tree.create_info("memo", source="chat", keyword_ids=[a.id])  # provenance "api": not the default
    tree.relate(a.id, "root", "part_of", reason="why")
    tree.delete_info(info.id)
    log = rows(tree_dir)
    root, create, update, info_row, link, relation, *deletes = log
    assert list(root) == ["op", "entity", "id", "v", "name", "created_at", "end"]
    assert list(create) == ["op", "entity", "id", "v", "name", "parent_id", "created_at", "end"]
    assert list(update) == ["op", "entity", "id", "v", "name", "parent_id", "created_at", "updated_at",
                            "aliases", "description", "metadata", "before", "end"]
    assert list(update["before"]) == ["op", "id", "v", "name", "parent_id", "created_at"]
    assert update["before"]["op"] == create["op"] and update["v"] == 2
    assert list(info_row) == ["op", "entity", "id", "v", "content", "created_at", "source", "provenance"]
    assert list(link) == ["op", "entity", "v", "info_id", "keyword_id", "relation", "created_by", "created_at", "end"]
    assert link["relation"] == "primary" and link["end"]["rows"] == 2
    assert list(relation) == ["op", "entity", "v", "from_id", "to_id", "type", "weight", "created_at", "reason", "end"]
    assert [r["entity"] for r in deletes] == ["link", "info"] and all(r["deleted"] is True for r in deletes)
    assert "end" not in deletes[0] and deletes[1]["end"]["kind"] == "delete_info"
    for row in log:
        assert is_op_id(row["op"])
    assert list(create["end"]) == ["kind", "actor", "ts", "rows", "prev", "crc"]  # format 3: the link, the checksum


def test_every_line_is_compact_orjson(tree, tree_dir):
    tree.batch_create_keywords([{"name": n} for n in ("北京", "Zürich", 'quote " and \\ slash')])
    raw = next((tree_dir / "log").glob("*.jsonl")).read_bytes().rstrip(b"\0")
    for line in raw.splitlines():
        assert orjson.dumps(orjson.loads(line)) == line


def test_multi_row_encoding_falls_back_when_metadata_mimics_the_row_separator(tree, tree_dir):
    tricky = {"list": [{"op": "x"}, {"op": "y"}], "text": ',{"op":"'}
    created = tree.batch_create_keywords([{"name": "A", "metadata": tricky}, {"name": "B"}])
    assert dict(created[0].metadata) == tricky
    log = rows(tree_dir)
    assert [r.get("name") for r in log[-2:]] == ["A", "B"]
    with KeywordTree(tree_dir, read_only=True) as reopened:
        assert dict(reopened.get_keyword(created[0].id).metadata) == tricky


def test_encode_operation_round_trips_through_replay(tree_dir):
    with KeywordTree(tree_dir, durability="none") as tree:
        made = tree.batch_create_keywords([{"name": f"k{i}", "aliases": [f"a{i}"]} for i in range(50)])
        snap = snapshot(tree, [k.id for k in made])
    with KeywordTree(tree_dir, read_only=True) as tree:
        assert snapshot(tree, [k.id for k in made]) == snap


def test_encode_operation_writes_one_line_per_change_and_an_end_marker():
    k = Keyword("a" * 32, "A", (), "root", "", EMPTY_METADATA, 1, 1.0, 1.0, False, "1" * 32, 1)
    op = Operation("1" * 32, "create_keyword", "user", 1.0, (Change(k, None), Change(k, None)), {"why": "test"})
    lines = encode_operation(op).splitlines()
    assert len(lines) == 2 and encode_operation(op).endswith(b"\n")
    assert "end" not in orjson.loads(lines[0])
    assert orjson.loads(lines[1])["end"] == {"kind": "create_keyword", "actor": "user", "ts": 1.0, "rows": 2,
                                             "audit": {"why": "test"}}


def test_op_ids_are_time_ordered_unique_and_monotonic_even_behind_the_log():
    clock = OpClock()
    ids = [clock.next()[0] for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and all(map(is_op_id, ids))
    future = "f" * 12 + "0" * 20  # an id from a writer whose clock runs far ahead
    clock.observe(future, 1e12)
    op_id, timestamp = clock.next()
    assert op_id > future and timestamp >= 1e12


def test_actor_is_recorded(tree_dir):
    with KeywordTree(tree_dir, durability="none", actor="agent-7") as tree:
        a = tree.create_keyword("A")
        info = tree.create_info("memo", keyword_ids=[a.id])
        assert tree.history()[-1].actor == "agent-7"
        assert tree.get_keywords_of_info(info.id) == [(a, RelationType.PRIMARY)]
    assert rows(tree_dir)[-1]["created_by"] == "agent-7"


def test_segments_rotate_at_the_manifest_size_and_replay_across_them(tmp_path):
    data_dir = tmp_path / "t"
    with KeywordTree(data_dir, durability="none", segment_bytes=4096) as tree:
        made = [tree.create_keyword(f"keyword number {i}") for i in range(80)]
        snap = snapshot(tree)
        metrics = tree.tree_metrics()
    segments = sorted((data_dir / "log").glob("*.jsonl"))
    assert len(segments) > 3 and metrics["log_segments"] == len(segments)
    assert metrics["log_bytes"] == sum(s.stat().st_size for s in segments)
    for segment in segments:
        assert segment.stem == orjson.loads(segment.read_bytes().splitlines()[0])["op"]
    with KeywordTree(data_dir, segment_bytes=1 << 30) as reopened:  # ignored: the manifest decides
        assert snapshot(reopened) == snap
        reopened.create_keyword("one more")
    assert len(sorted((data_dir / "log").glob("*.jsonl"))) >= len(segments)
    assert orjson.loads((data_dir / "manifest.json").read_bytes())["segment_bytes"] == 4096
    assert made[-1].level == 1


def test_durable_writes_preallocate_and_close_trims(tree_dir):
    tree = KeywordTree(tree_dir)  # durability="full"
    tree.create_keyword("A")
    segment = next((tree_dir / "log").glob("*.jsonl"))
    assert segment.read_bytes().endswith(b"\0")  # zero padding ahead of the data
    tree.close()
    assert segment.read_bytes().endswith(b"\n") and b"\0" not in segment.read_bytes()


def test_public_api_is_pinned():
    assert sorted(public_names) == sorted([
        "ROOT_ID", "AgentError", "AgentOutcome", "AnthropicLLMClient", "Change", "ClosedError", "CompactionReport",
        "CorruptLogError", "CycleError", "DamagedDirectoryError", "DiskFullError", "DuplicateKeywordError", "Finding",
        "FormatError", "GitError", "HasChildrenError", "Info", "InvalidInputError", "Keyword", "KeywordTree",
        "KwtreeError", "LimitExceededError", "Limits", "LLMError", "LLMResponseError", "LLMTimeoutError",
        "LLMUnavailableError", "Link", "LockTimeoutError", "MergeConflictError", "NotFoundError", "Operation",
        "ReadOnlyError", "Relation", "RelationType", "Report", "SearchResult", "SearchStatus", "StorageError",
        "UndoConflictError", "VersionConflictError", "normalize_name", "repair_directory", "restore",
        "verify_directory",
        # issue 27: what list_memories returns
        "ListedMemory", "MemoryPage",
        # issue 14: what the constructor and recall take or return
        "Embedder", "HashEmbedder", "Hit", "LinkedKeyword", "LLMClient", "RecallWeights", "StubLLMClient",
        # issue 15: what commit_session takes or returns, and what an extractor is made of
        "Candidate", "CommitDecision", "CommitOptions", "CommitResult", "DedupThresholds", "ExtractContext",
        "Extractor", "Policy",
        # issue 15: what forget returns
        "ForgetReport", "KeptInfo", "UnreachableCopy",
        # issue 15: the mem0-shaped surface
        "Memory",
        "KeywordAbstract",  # and what abstracts() returns
        # issue 25: a step of commit_session the LLM failed and what did it instead
        "CommitFallback",
        "PROVENANCES",  # issue 25: who said a memory (Info.provenance; recall(provenance=...))
        # issue 26: any OpenAI-compatible LLM, chosen by KWTREE_LLM; what extraction passed over
        "OpenAILLMClient", "llm_from_env", "PassedOver",
        "LoadedOutline",  # issue 29: what load_outline returns
    ])


@pytest.mark.parametrize("text, key", [
    ("Python", "python"), ("  Machine-Learning ", "machinelearning"), ("ＰＹＴＨＯＮ", "python"),
    ("ｶﾀｶﾅ", "カタカナ"), ("北京 大学", "北京大学"), ("Straße", "strasse"), ("C++", "c++"), ("C#", "c"),
    ("...", ""), ("a_b.c", "abc"), ("Ǆ", "dž"),
])
def test_normalize_name_examples(text, key):
    from kwtree import normalize_name

    assert normalize_name(text) == key
