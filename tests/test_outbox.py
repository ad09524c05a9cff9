"""The embedding outbox (DESIGN.md §6): enqueue/claim/done, dedupe, exclusive leases between
objects, threads and processes, a SIGKILLed worker's work taken over, backoff and dead
letters, the late-report rules, torn and garbage lines, compaction under a reader in another
process, read-only outboxes (``writable=False``), and the worker loop.

No sleeps: leases and backoff move with an injected clock; child processes are driven line
by line over pipes. Timeouts only bound a hang; nothing asserts on elapsed time.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from helpers import child_line

import kwtree.caches.outbox
from kwtree.caches.outbox import Item, Outbox, run_worker
from kwtree.errors import ClosedError, InvalidInputError, ReadOnlyError

HANG = 60  # seconds before a stuck child or thread is reported as a failure


class Clock:
    """A clock that moves only when told to."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "outbox.jsonl"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_box(path: Path, clock: Clock):
    opened: list[Outbox] = []

    def make(**kwargs) -> Outbox:
        kwargs.setdefault("clock", clock)
        box = Outbox(path, **kwargs)
        opened.append(box)
        return box

    yield make
    for box in opened:
        box.close()


def work(n: int, model: str = "m1") -> list[tuple[str, str, str, str]]:
    return [("info" if i % 2 else "keyword", f"e{i:03d}", f"h{i}", model) for i in range(n)]


def rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


# --- child processes ------------------------------------------------------------------------

CHILD = """
import json, sys, threading
from pathlib import Path
from kwtree.caches.outbox import Outbox, run_worker

path, lease, worker = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
box = Outbox(path, lease_seconds=lease)
held = {}
print("ready", flush=True)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "claim":
        items = box.claim(worker, int(arg))
        held.update((item.key, item) for item in items)
        print(json.dumps([item.key for item in items]), flush=True)
    elif cmd == "drain":  # claim batches of `arg` until nothing is left, then report them all
        keys = []
        while items := box.claim(worker, int(arg)):
            keys += [item.key for item in items]
            box.done(worker, items)
        print(json.dumps(keys), flush=True)
    elif cmd == "done":
        box.done(worker, [held[key] for key in json.loads(arg)])
        print("ok", flush=True)
    elif cmd == "enqueue":
        print(box.enqueue(tuple(t) for t in json.loads(arg)), flush=True)
    elif cmd == "status":
        print(json.dumps(box.status()), flush=True)
    elif cmd == "work":  # a worker that announces its batch, then hangs inside process()
        def process(items):
            print("processing " + json.dumps([item.key for item in items]), flush=True)
            sys.stdin.readline()
            return {}
        run_worker(box, worker, process, batch=int(arg), stop=threading.Event())
"""


class Child:
    """A Python process running CHILD on one outbox; talks line by line over its pipes."""

    def __init__(self, path: Path, worker: str, lease: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(CHILD), str(path), str(lease), worker],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )

    def readline(self) -> str:
        return child_line(self.proc, HANG)

    def ask(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.readline()

    def finish(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(HANG) == 0, self.proc.stderr.read()

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(HANG)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            pipe.close()


@pytest.fixture
def child(path: Path):
    started: list[Child] = []

    def start(worker: str, lease: float = 60.0) -> Child:
        started.append(Child(path, worker, lease))
        assert started[-1].readline() == "ready"
        return started[-1]

    yield start
    for c in started:
        c.cleanup()


# --- basics -----------------------------------------------------------------------------------


def test_public_names() -> None:
    assert sorted(kwtree.caches.outbox.__all__) == [
        "ERROR_BACKOFF_MAX", "Item", "Outbox", "WORKER_ERRORS", "record_results", "run_worker"]


def test_enqueue_claim_done_status(open_box) -> None:
    box = open_box()
    assert box.enqueue(work(3)) == 3
    assert box.status() == {"pending": 3, "leased": 0, "failed": 0, "done": 0, "dead": 0, "dead_items": []}
    first = box.claim("w1", 2)
    assert first == [Item("m1/e000/h0", "keyword", "e000", "h0", "m1", 0),
                     Item("m1/e001/h1", "info", "e001", "h1", "m1", 0)]
    assert (box.pending_count(), box.backlog()) == (1, 3)
    box.done("w1", first)
    status = box.status()
    assert (status["pending"], status["leased"], status["done"], box.backlog()) == (1, 0, 2, 1)
    assert [item.id for item in box.claim("w1", 10)] == ["e002"]
    assert box.claim("w1", 10) == []
    assert [r["r"] for r in rows(box.path)] == ["enqueue"] * 3 + ["claim"] * 2 + ["done"] * 2 + ["claim"]


def test_identical_enqueues_write_one_row(open_box) -> None:
    box = open_box()
    same = ("info", "i1", "abc", "m1")
    assert box.enqueue([same, same]) == 1
    assert box.enqueue([same]) == 0
    [item] = box.claim("w1", 5)
    assert box.enqueue([same]) == 0  # leased
    assert open_box().enqueue([same]) == 0  # another object learns it from the file
    assert box.enqueue([("info", "i1", "abc", "m2"), ("info", "i1", "abd", "m1")]) == 2  # other model, other text
    assert sum(r["r"] == "enqueue" for r in rows(box.path)) == 3
    box.done("w1", [item])
    # Callers queue only texts without a vector: a done item queued again lost its vector.
    assert box.enqueue([same, same]) == 1
    assert {i.key for i in box.claim("w1", 5)} == {"m1/i1/abc", "m2/i1/abc", "m1/i1/abd"}


def test_invalid_kind_and_closed(open_box) -> None:
    box = open_box()
    with pytest.raises(InvalidInputError):
        box.enqueue([("relation", "x", "h", "m")])
    box.close()
    box.close()
    with pytest.raises(ClosedError):
        box.claim("w", 1)


# --- leases -----------------------------------------------------------------------------------


def test_leases_exclusive_between_objects_and_expired_lease_reclaimed(open_box, clock: Clock) -> None:
    a, b = open_box(lease_seconds=10), open_box(lease_seconds=10)
    a.enqueue(work(4))
    got_a = a.claim("wa", 3)
    got_b = b.claim("wb", 3)
    assert len(got_a) == 3 and len(got_b) == 1
    assert not {i.key for i in got_a} & {i.key for i in got_b}
    clock.advance(9.9)
    assert a.claim("wa", 5) == b.claim("wb", 5) == []
    assert b.status()["leased"] == 4
    clock.advance(0.1)  # every lease has expired: anyone may take the work over
    assert b.pending_count() == 4
    taken = b.claim("wb", 5)
    assert {i.key for i in taken} == {i.key for i in got_a + got_b}
    assert a.claim("wa", 5) == []


def test_leases_exclusive_between_processes(open_box, child, path: Path) -> None:
    box = open_box(clock=time.time)
    box.enqueue(work(10))
    other = child("child")
    theirs = json.loads(other.ask("claim 6"))
    mine = [item.key for item in box.claim("parent", 10)]
    assert len(theirs) == 6 and len(mine) == 4 and not set(theirs) & set(mine)
    assert json.loads(other.ask("claim 10")) == []
    assert other.ask("done " + json.dumps(theirs)) == "ok"
    other.finish()
    assert box.status()["done"] == 6 and box.status()["leased"] == 4


def test_sigkilled_worker_lease_is_taken_over(open_box, child, path: Path) -> None:
    open_box(clock=time.time).enqueue(work(5))
    worker = child("doomed", lease=30.0)
    worker.proc.stdin.write("work 5\n")
    worker.proc.stdin.flush()
    line = worker.readline()
    assert line.startswith("processing ")
    held = json.loads(line.removeprefix("processing "))
    assert len(held) == 5
    worker.proc.send_signal(signal.SIGKILL)  # dies inside process(), every lease still live
    worker.proc.wait(HANG)
    assert worker.proc.returncode == -signal.SIGKILL

    assert open_box(clock=time.time).claim("rescuer", 10) == []  # the leases are still live
    later = open_box(clock=lambda: time.time() + 31)
    seen: list[str] = []

    def process(items: list[Item]) -> dict[str, str | None]:
        seen.extend(item.key for item in items)
        return {item.key: None for item in items}

    stop = threading.Event()
    run_worker(later, "rescuer", process, stop=stop, on_idle=stop.set)
    assert sorted(seen) == sorted(held)
    assert later.status()["done"] == 5 and later.backlog() == 0


# --- failures ---------------------------------------------------------------------------------


def test_backoff_then_dead_then_retry(open_box, clock: Clock, path: Path) -> None:
    box = open_box(max_attempts=3, backoff=1.0, max_backoff=1.5)
    box.enqueue([("info", "i1", "h", "m")])
    box.failed("w", box.claim("w", 1), "boom 1")
    assert box.status()["failed"] == 1 and box.backlog() == 1
    clock.advance(0.99)
    assert box.claim("w", 1) == []
    clock.advance(0.01)
    [item] = box.claim("w", 1)
    assert item.attempt == 1
    box.failed("w", [item], "boom 2")
    assert rows(path)[-1]["retry_at"] == clock.now + 1.5  # 2 ** 1 capped at max_backoff
    clock.advance(1.49)
    assert box.claim("w", 1) == []
    clock.advance(0.01)
    [item] = box.claim("w", 1)
    assert item.attempt == 2
    box.failed("w", [item], "boom 3")
    clock.advance(1_000)
    assert box.claim("w", 1) == []
    status = box.status()
    assert (status["dead"], status["pending"], box.backlog()) == (1, 0, 0)
    assert status["dead_items"] == [{"kind": "info", "id": "i1", "model": "m", "error": "boom 3", "attempt": 3}]
    assert open_box().status() == status  # the fold of the file says the same
    assert box.enqueue([("info", "i1", "h", "m")]) == 0  # dead is known: only retry_dead revives it
    assert box.retry_dead() == 1
    assert box.retry_dead() == 0
    [item] = box.claim("w", 1)
    assert item.attempt == 0 and box.status()["dead"] == 0


def test_late_reports_done_wins_and_stale_failures_do_not_count(open_box, clock: Clock) -> None:
    a, b = open_box(lease_seconds=5, max_attempts=1), open_box(lease_seconds=5, max_attempts=1)
    a.enqueue(work(2))
    late = a.claim("wa", 2)
    clock.advance(5)
    again = b.claim("wb", 2)
    a.failed("wa", late, "late")  # wb holds the latest claims: recorded, not counted
    assert b.status()["leased"] == 2 and b.status()["dead"] == 0
    a.done("wa", late[:1])  # done wins even though wb holds the lease
    b.failed("wb", again[:1], "after done")  # must not undo the done
    b.failed("wb", again[1:], "real")  # counted: max_attempts=1 makes it dead
    a.done("wa", [])
    status = a.status()
    assert (status["done"], status["dead"], status["leased"]) == (1, 1, 0)
    b.failed("wb", again[1:], "again")  # a dead item is not failed twice or revived
    a.retry_dead()
    b.failed("wb", again[1:], "stale")  # the retry reset the claim: no longer counts
    assert a.status()["pending"] == 1 and a.claim("wa", 5)[0].attempt == 0
    c = open_box(lease_seconds=5, max_attempts=1)
    assert c.status() == a.status()


def test_fold_rules_on_rows_written_elsewhere(open_box, path: Path, clock: Clock) -> None:
    def enqueue(key: str) -> dict:
        return {"r": "enqueue", "item": key, "kind": "info", "id": key, "hash": "h", "model": "m", "ts": 0}

    def claim(key: str, worker: str) -> dict:
        return {"r": "claim", "item": key, "worker": worker, "until": clock.now + 50, "ts": 0}

    def failed(key: str, worker: str) -> dict:
        return {"r": "failed", "item": key, "worker": worker, "error": "e", "attempt": 1, "retry_at": 0, "ts": 0}

    def dead(key: str) -> dict:
        return {"r": "dead", "item": key, "error": "e", "attempt": 1, "ts": 0}

    def done(key: str) -> dict:
        return {"r": "done", "item": key, "worker": "w9", "ts": 0}

    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [
        enqueue("A"), enqueue("B"), enqueue("C"), enqueue("D"),
        claim("A", "w1"), done("A"), failed("A", "w2"), dead("A"),  # done stays done...
        enqueue("A"), claim("A", "w5"),  # ...until its text is queued again (its vector was lost)
        claim("B", "w1"), claim("B", "w2"), failed("B", "w1"),  # w1 lost the lease: not counted
        claim("C", "w1"), failed("C", "w1"), dead("C"), done("C"),  # a late done beats dead
        claim("D", "w1"), failed("D", "w1"), failed("D", "w2"),  # counted once, from the holder
        {"r": "retry", "item": "D", "ts": 0},  # only a dead item is retried: attempt stays 1
        done("unknown"), claim("unknown", "w1"),
    ]))
    box = open_box()
    expected = {"pending": 1, "leased": 2, "failed": 0, "done": 1, "dead": 0, "dead_items": []}
    assert box.status() == expected
    [item] = box.claim("w3", 5)
    assert (item.key, item.attempt) == ("D", 1)
    box.compact()
    assert {r["item"] for r in rows(path)} == {"A", "B", "D"}
    assert open_box().status() == {**expected, "pending": 0, "leased": 3, "done": 0}


# --- damage and compaction ----------------------------------------------------------------------


def test_torn_and_garbage_lines_are_skipped(open_box, path: Path, caplog) -> None:
    box = open_box()
    box.enqueue(work(2))
    with open(path, "ab") as f:
        f.write(b"not json at all\n[1, 2]\n{\"r\": \"claim\"}\n")
        f.write(b'{"r": "enqueue", "item": "m1/e9/h9", "kind": "in')  # a crash mid-append
    caplog.set_level(logging.WARNING, logger="kwtree.caches.outbox")
    fresh = open_box()
    assert fresh.status()["pending"] == 2
    assert len([r for r in caplog.records if r.name == "kwtree.caches.outbox"]) == 4
    assert box.enqueue(work(3)) == 1  # appends after the torn tail stay readable
    assert fresh.backlog() == box.backlog() == open_box().backlog() == 3
    assert [i.id for i in open_box().claim("w", 5)] == ["e000", "e001", "e002"]


def test_compaction_keeps_open_and_dead_items_and_a_reader_process_follows(open_box, child, path: Path) -> None:
    box = open_box(clock=time.time, max_attempts=1)
    box.enqueue(work(6))
    reader = child("reader")
    assert json.loads(reader.ask("status"))["pending"] == 6  # it has the old file open and folded
    items = box.claim("w", 4)
    box.done("w", items[:2])
    box.failed("w", items[2:3], "boom")
    before, size = box.status(), path.stat().st_size
    box.compact()
    assert path.stat().st_size < size
    assert not {r["item"] for r in rows(path)} & {i.key for i in items[:2]}
    assert not path.with_suffix(".compact.tmp").exists()
    after = box.status()
    assert after == {**before, "done": 0}
    assert open_box(clock=time.time).status() == after
    # The reader notices the replaced file and keeps working on the new one.
    assert json.loads(reader.ask("status")) == after
    assert reader.ask("enqueue " + json.dumps(work(8)[6:])) == "2"
    assert sorted(json.loads(reader.ask("claim 10"))) == ["m1/e004/h4", "m1/e005/h5", "m1/e006/h6", "m1/e007/h7"]
    reader.finish()
    assert box.status()["leased"] == 5 and box.status()["dead"] == 1


def test_compaction_runs_by_itself_when_done_rows_dominate(open_box, path: Path) -> None:
    box = open_box()
    box.compact_min_droppable = 30
    box.enqueue(work(12))
    box.done("w", box.claim("w", 10))  # 10 * 3 done rows of 32: compacted
    assert [r["r"] for r in rows(path)] == ["enqueue", "enqueue"]
    assert box.backlog() == 2 and box.status()["done"] == 0


def test_a_read_only_outbox_reads_without_the_lock_and_writes_nothing(open_box, path: Path, caplog) -> None:
    reader = open_box(writable=False)
    assert reader.backlog() == 0 and reader.status()["pending"] == 0
    assert list(path.parent.iterdir()) == []  # no outbox, no lock file
    writer = open_box()
    writer.enqueue(work(2))
    writer.done("w", writer.claim("w", 1))
    (path.parent / "outbox.lock").unlink()  # a reader that took the lock would make it again
    with open(path, "ab") as f:
        f.write(b'{"r": "enqueue", "item": "m1/e9/h9", "kind": "in')  # an append under way
    caplog.set_level(logging.WARNING, logger="kwtree.caches.outbox")
    assert reader.backlog() == 1 and reader.status()["done"] == 1
    with open(path, "ab") as f:
        f.write(b'fo", "id": "e9", "hash": "h9", "model": "m1", "ts": 1}\n')
    assert reader.backlog() == 2  # the partial line was not skipped as torn: read once whole
    assert not caplog.records
    data = path.read_bytes()
    dead = Item("m1/e000/h0", "keyword", "e000", "h0", "m1")
    for write in (lambda: reader.enqueue(work(4)), lambda: reader.claim("w", 1), lambda: reader.done("w", [dead]),
                  lambda: reader.failed("w", [dead], "boom"), reader.retry_dead, reader.compact):
        with pytest.raises(ReadOnlyError):
            write()
    assert list(path.parent.iterdir()) == [path] and path.read_bytes() == data


# --- workers ----------------------------------------------------------------------------------


def test_run_worker_processes_everything_and_stops(open_box) -> None:
    box = open_box(max_attempts=1)
    box.enqueue(work(10))
    calls: list[list[str]] = []

    def process(items: list[Item]) -> dict[str, str | None]:
        calls.append([item.id for item in items])
        if len(calls) == 3:
            raise RuntimeError("embedder down")
        return {item.key: ("bad text" if item.id == "e001" else None) for item in items if item.id != "e002"}

    stop = threading.Event()
    run_worker(box, "w", process, batch=3, stop=stop, on_idle=stop.set)
    assert calls == [["e000", "e001", "e002"], ["e003", "e004", "e005"], ["e006", "e007", "e008"], ["e009"]]
    status = box.status()
    assert (status["done"], status["dead"], box.backlog()) == (5, 5, 0)
    errors = {d["id"]: d["error"] for d in status["dead_items"]}
    assert errors == {"e001": "bad text", "e002": "process returned no result for this item",
                      "e006": "RuntimeError: embedder down", "e007": "RuntimeError: embedder down",
                      "e008": "RuntimeError: embedder down"}

    idle = threading.Event()
    thread = threading.Thread(target=run_worker, args=(box, "w", process),
                              kwargs={"stop": stop, "idle_wait": HANG, "on_idle": idle.set})
    stop.clear()
    thread.start()
    assert idle.wait(HANG)
    stop.set()  # wakes the idle wait at once
    thread.join(HANG)
    assert not thread.is_alive()


def test_concurrent_claims_never_hand_out_an_item_twice(open_box) -> None:
    boxes = [open_box(), open_box()]
    boxes[0].enqueue(work(300))
    barrier = threading.Barrier(8)
    claimed: list[str] = []

    def claimer(n: int) -> None:
        box = boxes[n % 2]
        barrier.wait(HANG)
        while items := box.claim(f"w{n}", 7):
            claimed.extend(item.key for item in items)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG)
    assert len(claimed) == 300 and len(set(claimed)) == 300


def test_concurrent_claims_from_processes(open_box, child, path: Path) -> None:
    box = open_box(clock=time.time)
    box.enqueue(work(600))
    workers = [child(f"p{n}") for n in range(3)]
    for w in workers:  # all three are ready and waiting; they start draining together
        w.proc.stdin.write("drain 2\n")
        w.proc.stdin.flush()
    claimed = Counter(key for w in workers for key in json.loads(w.readline()))
    for w in workers:
        w.finish()
    assert len(claimed) == 600 and set(claimed.values()) == {1}
    assert Counter(r["item"] for r in rows(path) if r["r"] == "claim") == claimed
    assert box.status()["done"] == 600
