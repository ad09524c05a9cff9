"""Several writers and readers on one data directory, with real processes and threads:
concurrent durable writers lose nothing and keep op ids ordered, a SIGKILLed writer loses
nothing it acknowledged and leaves no partial operation, a tailing reader never sees half
an operation (across segment rotation), threads sharing one tree are safe, and the writer
lock excludes other processes and is freed when its holder dies.

DESIGN.md §3 (threads, concurrency, durability). No sleeps: processes are coordinated with
pipes (a child prints a line, the parent reads it, and the other way round), threads with
barriers and events. Timeouts only bound a hang; nothing asserts on elapsed time.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import sys
import threading
from itertools import pairwise
from pathlib import Path

import orjson
import pytest
from helpers import Child, log_bytes, snapshot

from kwtree import KeywordTree, LockTimeoutError, verify_directory
from kwtree.stores.lock import FileLockBackend, FlockBackend, WriterLock

HANG = 120  # seconds before a stuck child is reported as a failure (never reached normally)


def log_ops(data_dir: Path) -> list[str]:
    """The op id of every whole operation, in file order (segments in name order)."""
    ops = []
    data = log_bytes(data_dir)
    assert b"\0" not in data, "padding left in a closed log"
    for line in data.split(b"\n")[:-1]:
        row = orjson.loads(line)
        if "end" in row:
            ops.append(row["op"])
    return ops


def assert_op_ids_unique_and_increasing(data_dir: Path) -> list[str]:
    ops = log_ops(data_dir)
    assert len(set(ops)) == len(ops)
    assert all(a < b for a, b in pairwise(ops))
    return ops


# --- 5. concurrent durable writer processes -----------------------------------------------------

WRITER = """
    import json, sys
    from kwtree import KeywordTree
    data_dir, tag, rounds, burst = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    tree = KeywordTree(data_dir, durability="full", lock_timeout=60)
    ids = []
    for r in range(rounds):
        print("ready", flush=True)
        assert sys.stdin.readline() == "go\\n"
        for _ in range(burst):
            ids.append(tree.create_keyword(f"{tag}-{len(ids)}", llm_auto_place=False).id)
    tree.close()
    print("ready", json.dumps(ids), flush=True)
"""


def start_together(children, code: str, args_list: list[tuple]) -> list[Child]:
    """Start children, wait until each is ready, then release them all at once (a barrier)."""
    procs = [children(code, *args) for args in args_list]
    release_together(procs)
    return procs


def release_together(procs: list[Child]) -> list[str]:
    ready = [child.expect("ready") for child in procs]
    for child in procs:
        child.send("go")
    return ready


def test_four_durable_writer_processes_lose_nothing(tmp_path, children):
    """Four processes, each 100 durable creates in 10 bursts; every burst starts at a barrier
    with the other three, so the writers hand the lock to each other many times."""
    data_dir = tmp_path / "tree"
    KeywordTree(data_dir, durability="full").close()
    rounds, burst = 10, 10
    per_child = rounds * burst
    procs = [children(WRITER, data_dir, f"p{n}", rounds, burst) for n in range(4)]
    for _ in range(rounds):
        release_together(procs)
    written = {f"p{n}": json.loads(child.expect("ready ")[len("ready "):]) for n, child in enumerate(procs)}
    for child in procs:
        child.finish()

    ops = assert_op_ids_unique_and_increasing(data_dir)
    assert len(ops) == 1 + 4 * per_child  # root + every create, nothing lost or doubled
    with KeywordTree(data_dir, read_only=True) as tree:
        children_of_root = tree.get_children("root")
        assert len(children_of_root) == 4 * per_child
        assert tree.tree_metrics()["keywords"] == 4 * per_child
        for tag, ids in written.items():
            assert len(ids) == per_child
            for i, kid in enumerate(ids):
                keyword = tree.get_keyword(kid)
                assert keyword.name == f"{tag}-{i}" and keyword.parent_id == "root" and keyword.version == 1
        # each writer's own operations appear in the order it made them
        position = {k.id: n for n, k in enumerate(children_of_root)}
        for ids in written.values():
            assert [position[kid] for kid in ids] == sorted(position[kid] for kid in ids)
        # all four wrote in every round, so the log changes hands at least three times a round
        writers_in_order = [k.name.split("-")[0] for k in children_of_root]
        hand_overs = sum(1 for a, b in pairwise(writers_in_order) if a != b)
        assert hand_overs >= 3 * rounds


RACER = """
    import json, sys
    from kwtree import KeywordTree, DuplicateKeywordError, VersionConflictError
    data_dir, tag, target = sys.argv[1], sys.argv[2], sys.argv[3]
    tree = KeywordTree(data_dir, durability="full", lock_timeout=60)
    print("ready", flush=True)
    assert sys.stdin.readline() == "go\\n"
    result = {}
    try:
        result["created"] = tree.create_keyword("shared name").id
    except DuplicateKeywordError as exc:
        result["duplicate_of"] = exc.existing_id
    try:
        result["updated"] = tree.update_keyword(target, {"description": tag}, 1).version
    except VersionConflictError as exc:
        result["conflict"] = [exc.expected, exc.actual]
    tree.close()
    print(json.dumps(result), flush=True)
"""


def test_racing_writers_validate_against_what_the_others_wrote(tmp_path, children):
    """Each writer catches up under the lock before validating: one of four racing creates
    of the same name wins, and one of four updates at version 1 wins; the rest are refused."""
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="full") as tree:
        target = tree.create_keyword("target")
    procs = start_together(children, RACER, [(data_dir, f"w{n}", target.id) for n in range(4)])
    results = [json.loads(child.finish()) for child in procs]

    created = [r["created"] for r in results if "created" in r]
    assert len(created) == 1
    assert all(r["duplicate_of"] == created[0] for r in results if "created" not in r)
    winners = [n for n, r in enumerate(results) if "updated" in r]
    assert len(winners) == 1 and results[winners[0]]["updated"] == 2
    assert all(r["conflict"] == [1, 2] for r in results if "updated" not in r)
    assert_op_ids_unique_and_increasing(data_dir)
    with KeywordTree(data_dir, read_only=True) as tree:
        assert [k.id for k in tree.find_keywords("shared name")] == created
        assert tree.get_keyword(target.id).description == f"w{winners[0]}"
        assert tree.get_keyword(target.id).version == 2


OPENER = """
    import sys
    from kwtree import KeywordTree
    print("ready", flush=True)
    assert sys.stdin.readline() == "go\\n"
    try:
        KeywordTree(sys.argv[1], durability="full", lock_timeout=60).close()
        print("opened", flush=True)
    except Exception as exc:
        print("failed", type(exc).__name__, exc, flush=True)
"""


def test_processes_opening_a_new_directory_together_all_succeed(tmp_path, children):
    """Four processes released together open the same new directory: the first creates it,
    the others must wait for it (the creation is done under the writer lock) and see one root.
    Several trials, because which process loses the race is up to the scheduler."""
    for trial in range(5):
        data_dir = tmp_path / f"tree{trial}"
        procs = start_together(children, OPENER, [(data_dir,)] * 4)
        outcomes = [child.finish().strip() for child in procs]
        assert outcomes == ["opened"] * 4
        roots = [line for line in log_bytes(data_dir).split(b"\n") if b'"id":"root"' in line]
        assert len(roots) == 1  # one of them created the root, the others saw it


# --- 6. SIGKILL in the middle of a stream of durable writes ---------------------------------------

KILLED_WRITER = """
    import sys
    from kwtree import KeywordTree
    data_dir, run = sys.argv[1], sys.argv[2]
    tree = KeywordTree(data_dir, durability="full")
    parent = tree.create_keyword(f"run {run}")
    print("P", parent.id, flush=True)
    for i in range(20000):
        if i % 3 == 2:  # a batch of five: a head under the run's keyword and four under it
            specs = [{"name": f"b{i}m0", "parent_id": parent.id, "ref": "head"}]
            specs += [{"name": f"b{i}m{j}", "parent_ref": "head"} for j in range(1, 5)]
            keywords = tree.batch_create_keywords(specs)
            print("B", i, *(k.id for k in keywords), flush=True)
        else:
            print("S", i, tree.create_keyword(f"s{i}", parent.id).id, flush=True)
"""


def parse_acks(lines: list[str]) -> list[tuple[str, int, list[str]]]:
    acks = []
    for line in lines:
        kind, index, *ids = line.split()
        acks.append((kind, int(index), ids))
    return acks


def check_run(tree: KeywordTree, parent_id: str, acks) -> int:
    """The run's writes form a prefix of its sequence of operations: every acknowledged one,
    perhaps a few more it made before the kill, never a hole and never part of a batch.
    Returns how many of its operations are visible."""
    for kind, index, ids in acks:
        names = [f"s{index}"] if kind == "S" else [f"b{index}m{j}" for j in range(5)]
        assert [tree.get_keyword(kid).name for kid in ids] == names
    visible = {}
    for keyword in tree.get_children(parent_id):
        if keyword.name.startswith("s"):
            index = int(keyword.name[1:])
            assert index % 3 != 2
            visible[index] = [keyword.id]
        else:
            index, member = map(int, keyword.name[1:].split("m"))
            assert index % 3 == 2 and member == 0
            members = tree.get_children(keyword.id)
            assert [m.name for m in members] == [f"b{index}m{j}" for j in range(1, 5)]  # all or nothing
            visible[index] = [keyword.id, *(m.id for m in members)]
    assert sorted(visible) == list(range(len(visible)))  # a prefix: no operation lost in the middle
    assert len(visible) >= len(acks)
    for _kind, index, ids in acks:
        assert visible[index] == ids
    return len(visible)


@pytest.mark.parametrize("segment_bytes", [None, 4096], ids=["one_segment", "rotating"])
def test_sigkill_mid_stream_loses_no_acknowledged_write_and_shows_no_partial_op(tmp_path, children, segment_bytes):
    """A durable writer is SIGKILLed after a seeded-random number of acknowledged writes, ten
    times over, each new writer continuing the log the killed one left (padding and all).

    (A SIGKILL cannot tear one operation: each is written by a single pwrite. Torn
    operations are covered byte by byte in test_crash.py; this covers acknowledgement,
    ordering, the lock and the preallocation a dead writer leaves behind.)"""
    data_dir = tmp_path / "tree"
    KeywordTree(data_dir, durability="full", segment_bytes=segment_bytes).close()
    rng = random.Random(20240611)
    # kill points (acknowledgements read before SIGKILL): a few random, a few just before a batch
    kill_points = [rng.randint(1, 150) for _ in range(6)] + [1, 2, 5, 3 * rng.randint(3, 40) + 2]
    runs = []
    total_keywords = 0
    for run, kill_at in enumerate(kill_points):
        child = children(KILLED_WRITER, data_dir, run)
        parent_id = child.expect("P ").split()[1]
        lines = [child.readline() for _ in range(kill_at)]
        rest = child.kill()
        # lines printed after the ones we read were acknowledged too; a cut-off last line was not
        lines += rest.split("\n")[:-1]
        acks = parse_acks(lines)
        assert [index for _, index, _ in acks] == list(range(len(acks)))
        runs.append((parent_id, acks))

        *sealed, newest = sorted((data_dir / "log").glob("*.jsonl"))
        for segment in sealed:  # a sealed segment never keeps padding, even when its writer died
            data = segment.read_bytes()
            assert b"\0" not in data and data.endswith(b"\n")
        if segment_bytes is None:
            assert b"\0" in newest.read_bytes()  # killed with its preallocated padding in place

        with KeywordTree(data_dir, read_only=True) as tree:
            total_keywords = 0
            for pid, run_acks in runs:  # earlier runs are intact too
                visible = check_run(tree, pid, run_acks)
                total_keywords += 1 + sum(5 if i % 3 == 2 else 1 for i in range(visible))
            assert tree.tree_metrics()["keywords"] == total_keywords
    if segment_bytes is not None:
        assert len(list((data_dir / "log").glob("*.jsonl"))) > 3

    # the next writer takes the lock the killed one held, continues the log and trims on close
    with KeywordTree(data_dir, durability="full", lock_timeout=5) as tree:
        expected_before = snapshot(tree)
        last = tree.create_keyword("after the kills")
        expected = snapshot(tree, [last.id])
    assert expected_before["metrics"]["keywords"] == total_keywords
    ops = assert_op_ids_unique_and_increasing(data_dir)  # also: no padding after a clean close
    assert log_bytes(data_dir).endswith(b"\n")
    with KeywordTree(data_dir, read_only=True) as tree:
        assert snapshot(tree, [last.id]) == expected
        assert tree.tree_metrics()["operations"] == len(ops)
        for pid, run_acks in runs:
            check_run(tree, pid, run_acks)


# --- 7. a tailing reader never sees half an operation ---------------------------------------------

BATCH_WRITER = """
    import sys
    from kwtree import KeywordTree
    data_dir, parent_id, k, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    checkpoints = {int(c) for c in sys.argv[5].split(",")}
    tree = KeywordTree(data_dir, durability="full")
    for b in range(count):
        tree.batch_create_keywords(
            [{"name": f"b{b}n{j}", "parent_id": parent_id, "description": "x" * 60} for j in range(k)]
        )
        if b in checkpoints:  # wait for the reader to look at exactly this state
            print("sync", b, flush=True)
            assert sys.stdin.readline() == "go\\n"
    tree.close()
    print("done", flush=True)
"""


def check_whole_batches(tree: KeywordTree, parent_id: str, k: int, *, only_batches: bool = True) -> int:
    """Under ``parent_id`` (and, if the tree holds nothing else, in the whole tree) every batch
    of ``k`` keywords is either wholly visible or not at all, and batches arrive in order."""
    kids = tree.get_children(parent_id)
    assert len(kids) % k == 0, f"{len(kids)} keywords: half a batch is visible"
    groups: dict[str, int] = {}
    for keyword in kids:
        batch = keyword.name.split("n")[0]
        groups[batch] = groups.get(batch, 0) + 1
    assert set(groups.values()) <= {k}
    assert sorted(groups, key=lambda b: int(b[1:])) == [f"b{i}" for i in range(len(groups))]
    if only_batches:
        assert (tree.tree_metrics()["keywords"] - 1) % k == 0
    return len(kids)


def test_tailing_reader_never_sees_half_a_batch_across_segment_rotation(tmp_path, children):
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="full", segment_bytes=4096) as tree:
        parent = tree.create_keyword("batches")
    k, count = 4, 300
    checkpoints = [0, 7, count // 2, count - 1]
    reader = KeywordTree(data_dir, read_only=True)
    child = children(BATCH_WRITER, data_dir, parent.id, k, count, ",".join(map(str, checkpoints)))
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in child.proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()

    applied, seen, synced, last = 0, set(), [], 0
    while True:
        applied += reader.refresh()
        count_now = check_whole_batches(reader, parent.id, k)
        assert count_now >= last  # never goes back
        last = count_now
        seen.add(count_now)
        try:
            line = lines.get_nowait()
        except queue.Empty:
            continue
        if line.startswith("sync"):
            b = int(line.split()[1])
            applied += reader.refresh()
            assert check_whole_batches(reader, parent.id, k) == (b + 1) * k
            synced.append((b, reader.tree_metrics()["log_segments"]))
            child.send("go")
        else:
            assert line == "done", child.proc.stderr.read()
            break
    child.wait_exit()
    applied += reader.refresh()
    assert check_whole_batches(reader, parent.id, k) == count * k
    assert applied == count  # one operation per batch, each applied exactly once
    assert [b for b, _ in synced] == checkpoints
    assert synced[-1][1] > 3 and synced[0][1] < synced[-1][1]  # the reader followed rotations
    with KeywordTree(data_dir, read_only=True) as fresh:
        assert snapshot(reader) == snapshot(fresh)
    reader.close()
    assert_op_ids_unique_and_increasing(data_dir)
    assert len(sorted((data_dir / "log").glob("*.jsonl"))) > 3


# --- 8. threads sharing one tree ------------------------------------------------------------------


@pytest.fixture
def frequent_thread_switches():
    """Make the interpreter switch threads every few microseconds (instead of every 5 ms) so
    that a reader thread gets to run in the middle of a write, if anything lets it."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(previous)


def test_threads_sharing_one_tree_lose_nothing_and_readers_see_whole_batches(tmp_path, frequent_thread_switches):
    """Four writer threads (batches of ``k`` plus single creates) and two reader threads on one
    tree: every write lands, and no read ever shows part of a batch."""
    data_dir = tmp_path / "tree"
    tree = KeywordTree(data_dir, durability="none")
    writers, readers, batches, k = 4, 2, 60, 40
    batch_parents = [tree.create_keyword(f"batches {w}") for w in range(writers)]
    single_parents = [tree.create_keyword(f"singles {w}") for w in range(writers)]
    start = threading.Barrier(writers + readers, timeout=HANG)
    middle = threading.Barrier(writers + readers, timeout=HANG)
    writers_done = threading.Event()
    errors: list[BaseException] = []
    reads: list[int] = []
    at_middle: list[list[int]] = []

    def guarded(body):
        def run(*args):
            try:
                body(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)
                start.abort()
                middle.abort()

        return run

    @guarded
    def write(w: int) -> None:
        start.wait()
        for b in range(batches):
            tree.batch_create_keywords([{"name": f"b{b}n{j}", "parent_id": batch_parents[w].id} for j in range(k)])
            tree.create_keyword(f"s{b}", single_parents[w].id)
            if b == batches // 2 - 1:
                middle.wait()

    @guarded
    def read() -> None:
        start.wait()
        count = 0
        while not writers_done.is_set():
            for p in batch_parents:  # cheap reads, many of them
                assert len(tree.get_children(p.id)) % k == 0, "half a batch is visible"
            metrics = tree.tree_metrics()  # a long read: walks every keyword
            assert metrics["operations"] >= 1 + 2 * writers
            if count % 50 == 0:
                for p in batch_parents:
                    check_whole_batches(tree, p.id, k, only_batches=False)
            count += 1
            if count == 1:
                middle.wait()  # every writer has done half of its batches
                at_middle.append([len(tree.get_children(p.id)) for p in batch_parents])
        reads.append(count)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    threads += [threading.Thread(target=read) for _ in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads[:writers]:
        thread.join(HANG)
    writers_done.set()
    for thread in threads[writers:]:
        thread.join(HANG)
    assert not errors, errors
    assert len(reads) == readers and min(reads) >= 1
    assert len(at_middle) == readers and all(n >= batches // 2 * k for seen in at_middle for n in seen)

    for w in range(writers):
        names = sorted(c.name for c in tree.get_children(batch_parents[w].id))
        assert names == sorted(f"b{b}n{j}" for b in range(batches) for j in range(k))
        assert sorted(c.name for c in tree.get_children(single_parents[w].id)) == sorted(
            f"s{b}" for b in range(batches)
        )
    expected = snapshot(tree)
    assert expected["metrics"]["keywords"] == 2 * writers + writers * batches * (k + 1)
    assert expected["metrics"]["operations"] == 1 + 2 * writers + writers * batches * 2
    tree.close()
    assert_op_ids_unique_and_increasing(data_dir)
    with KeywordTree(data_dir, read_only=True) as reopened:
        assert snapshot(reopened) == expected


def test_two_trees_on_one_directory_in_one_process_exclude_each_other(tmp_path, frequent_thread_switches):
    """Two KeywordTree objects (separate lock descriptors) written from two threads each."""
    data_dir = tmp_path / "tree"
    trees = [KeywordTree(data_dir, durability="none") for _ in range(2)]
    start = threading.Barrier(4, timeout=HANG)
    errors: list[BaseException] = []
    made: dict[str, list[str]] = {}

    def write(tree: KeywordTree, tag: str) -> None:
        try:
            start.wait()
            made[tag] = [tree.create_keyword(f"{tag}-{i}", llm_auto_place=False).id for i in range(50)]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=write, args=(trees[n % 2], f"t{n}")) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG)
    assert not errors, errors
    for tree in trees:
        tree.refresh()
    assert snapshot(trees[0]) == snapshot(trees[1])
    for tree in trees:
        tree.close()
    ops = assert_op_ids_unique_and_increasing(data_dir)
    assert len(ops) == 1 + 200
    with KeywordTree(data_dir, read_only=True) as tree:
        for tag, ids in made.items():
            assert [tree.get_keyword(kid).name for kid in ids] == [f"{tag}-{i}" for i in range(50)]


OTHER_WRITER = """
    import sys
    from kwtree import KeywordTree
    with KeywordTree(sys.argv[1], durability="none", worker=False) as tree:
        kid = tree.find_keywords("start")[0].id
        for n in range(5):
            tree.create_info(f"memory {n} about tea", keyword_ids=[kid])
        tree.recall("tea", mode="bm25")  # the shared full-text index now reflects these
        tree.compact()  # the operations this process's reader has not read are rewritten
        tree.create_info("a late memory about coffee", keyword_ids=[kid])
        tree.recall("coffee", mode="bm25")
    print("done", flush=True)
"""


def test_a_writer_behind_another_process_never_rewinds_the_shared_full_text_index(tmp_path, children, caplog):
    """A writable tree that has not read another process's operations, searching for the
    first time, found the shared index ahead of its state and rebuilt it at that older state:
    the index then lacked the other writer's memories (every process searching it missed
    them) and, after a compaction, named an operation the log no longer holds (``verify``
    error). The search catches up with the log first instead."""
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="none", worker=False) as tree:
        tree.create_info("memory before about tea", keyword_ids=[tree.create_keyword("start").id])
    with KeywordTree(data_dir, durability="none", worker=False) as behind:
        assert "done" in children(OTHER_WRITER, data_dir).finish()
        with caplog.at_level(logging.WARNING, logger="kwtree.cache"):
            hits = behind.recall("memory", mode="bm25", k=20)
        assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
        # What the other process wrote, too: the search read the log first.
        assert len([h for h in hits if h.bm25 is not None]) == 7
    report = verify_directory(data_dir)
    assert report.ok, report.to_text()
    with KeywordTree(data_dir, read_only=True) as reader:
        assert [h.info.content for h in reader.recall("coffee", mode="bm25") if h.bm25 is not None] == [
            "a late memory about coffee"]
        assert len([h for h in reader.recall("tea", mode="bm25", k=20) if h.bm25 is not None]) == 6


# --- 9. the writer lock across processes --------------------------------------------------------

LOCK_HOLDER = """
    import sys
    from pathlib import Path
    from kwtree.stores.lock import FileLockBackend, FlockBackend, WriterLock
    backend = {"flock": FlockBackend, "filelock": FileLockBackend}[sys.argv[2]]
    lock = WriterLock(Path(sys.argv[1]), 60.0, backend=backend)
    while True:
        lock.acquire()
        print("held", flush=True)
        if sys.stdin.readline() != "release\\n":
            break
        lock.release()
        print("released", flush=True)
        if sys.stdin.readline() != "again\\n":
            break
"""

BACKENDS = {"flock": FlockBackend, "filelock": FileLockBackend}


@pytest.mark.parametrize("holder", sorted(BACKENDS))
def test_write_while_another_process_holds_the_lock_times_out_and_changes_nothing(tmp_path, children, holder):
    data_dir = tmp_path / "tree"
    with KeywordTree(data_dir, durability="full") as tree:
        existing = tree.create_keyword("existing")
    tree = KeywordTree(data_dir, durability="full", lock_timeout=0.05)
    before_state = snapshot(tree, [existing.id])
    child = children(LOCK_HOLDER, data_dir / "lock", holder)
    child.expect("held")
    before_log = log_bytes(data_dir)

    with pytest.raises(LockTimeoutError):
        tree.create_keyword("blocked")
    with pytest.raises(LockTimeoutError):
        tree.batch_create_keywords([{"name": "blocked 1"}, {"name": "blocked 2"}])
    assert log_bytes(data_dir) == before_log
    assert snapshot(tree, [existing.id]) == before_state
    assert tree.find_keywords("blocked") == []
    assert tree.refresh() == 0  # readers never take the lock
    with KeywordTree(data_dir, read_only=True) as reader:
        assert snapshot(reader, [existing.id]) == before_state

    child.send("release")
    child.expect("released")
    made = tree.create_keyword("after release")
    child.send("again")
    child.expect("held")
    with pytest.raises(LockTimeoutError):
        tree.create_keyword("blocked again")
    child.kill()  # a holder that dies, even by SIGKILL, frees the lock
    made2 = tree.create_keyword("after kill")
    tree.close()
    with KeywordTree(data_dir, read_only=True) as reader:
        assert [k.name for k in reader.get_children("root")] == ["existing", "after release", "after kill"]
        assert [made.id, made2.id] == [k.id for k in reader.get_children("root")][1:]


@pytest.mark.parametrize("contender", sorted(BACKENDS))
@pytest.mark.parametrize("holder", sorted(BACKENDS))
def test_lock_backends_exclude_another_process_and_are_freed_by_sigkill(tmp_path, children, holder, contender):
    path = tmp_path / "lock"
    child = children(LOCK_HOLDER, path, holder)
    child.expect("held")
    lock = WriterLock(path, 0.05, backend=BACKENDS[contender])
    try:
        with pytest.raises(LockTimeoutError):
            lock.acquire()
        child.send("release")
        child.expect("released")
        lock.timeout = 0  # free now: the first try must succeed
        lock.acquire()
        child.send("again")  # the holder now waits for us
        lock.release()
        child.expect("held")
        lock.timeout = 0.05
        with pytest.raises(LockTimeoutError):
            lock.acquire()
        child.kill()
        lock.timeout = 0
        lock.acquire()  # the kernel released the dead holder's lock
        lock.release()
    finally:
        lock.close()
    assert path.exists()  # the lock file stays (deleting it would split waiters across inodes)
