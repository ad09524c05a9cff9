"""The crash matrix: real writer processes SIGKILLed in the middle of every kind of write
(every public write method, batches, undo), compaction, snapshot, restore, import_json,
repair and the embedding worker (the background thread and the ``kwtree worker`` process).

A row is one kind of action. Its child process (this file run as a script) opens the tree
with durability="full" and repeats the action (with the writes it needs first) until it is
killed. Before each action it appends a ``begin`` record to an acknowledgement file; after
the call returns it appends an ``ack`` record — the op id, the ``history()`` and the
``reads_digest`` the child saw then — and fsyncs the file before it prints ``A``: an
acknowledged operation is one whose record is on disk. The parent reads the child's lines up
to a seeded-random ``B <row>`` (the child is starting that action) and SIGKILLs it there, or
when the child's next line arrives but no later than a random fraction of a second.

After each kill, on the same directory (the next child continues what the dead one left):
``verify()`` finds no error; the log still holds every operation acknowledged since the last
history rewrite (compaction, restore), and nothing but the one operation in flight was added;
an ``as_of`` view at each acknowledged operation has the digest the child recorded; a restore
or compaction in flight either happened whole or not at all; acknowledged snapshots restore
to what the child saw, acknowledged imports open to what the child saw; the target of an
import in flight holds the whole import or takes the same import again, and then verifies clean
and opens to the state of that export imported; after a killed ``kwtree worker`` every info
gets embedded.

Under the default profile each row is killed once; KWTREE_HYPOTHESIS_PROFILE=thorough kills
each of the 27 rows 8 times (216 kills).
"""

from __future__ import annotations

import hashlib
import os
import random
import select
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import THOROUGH

from kwtree import (
    ROOT_ID,
    InvalidInputError,
    KeywordTree,
    KwtreeError,
    restore,
    verify_directory,
)
from kwtree.testing import WORDS, known_ids, public_reads, reads_digest

WRITES = [
    "create_keyword", "create_keyword_auto_placed", "update_keyword", "add_alias", "remove_alias",
    "move_keyword", "merge_keywords", "delete_keyword", "create_info", "create_info_auto_linked", "update_info",
    "delete_info",
    "link_info", "unlink_info", "relate", "unrelate", "batch_create_keywords", "batch_create_infos",
    "undo", "apply_reorganize_plan",
]
MAINTENANCE = ["compact", "snapshot", "restore", "import_json", "repair", "worker_thread", "worker_process"]
ROWS = WRITES + MAINTENANCE
#: Actions after which the log no longer holds the operations acknowledged before them.
REWRITES = {"compact", "restore"}
THOROUGH_KILLS_PER_ROW = 8
KILLS_PER_ROW = THOROUGH_KILLS_PER_ROW if THOROUGH else 1
LIMIT = 60.0  # seconds a wait_indexed may take before the test fails
MAX_KILL_DELAY = 0.3  # seconds: the latest a kill comes after the child starts the action
AS_OF_SAMPLE = 4  # acknowledged operations of earlier runs whose as_of views are checked again


def live_digest(tree: KeywordTree) -> str:
    """The live state only (what is reachable from the root, without the operation count):
    what a compaction keeps."""
    reads = public_reads(tree)
    reads["metrics"] = {k: v for k, v in reads["metrics"].items() if k != "operations"}
    return hashlib.sha256(repr(reads).encode()).hexdigest()[:32]


def import_digest(tree: KeywordTree) -> str:
    """The state an import left, without the import's own op id (each import is a new
    operation): two imports of the same export have equal import digests."""
    reads = repr(public_reads(tree)).replace(tree.last_op_id, "<the import>")
    return hashlib.sha256(reads.encode()).hexdigest()[:32]


# --- the child: a writer that records what it acknowledged -----------------------------------


class Acks:
    """The acknowledgement file: one JSON record a line, each fsynced before it is reported."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, record: dict[str, Any]) -> None:
        os.write(self.fd, orjson.dumps(record) + b"\n")
        os.fsync(self.fd)


class Writer:
    """Runs one row's action over and over on ``tree``, with the writes it needs first."""

    def __init__(self, tree: KeywordTree, acks: Acks, work: Path, seed: int) -> None:
        self.tree, self.acks, self.work = tree, acks, work
        self.rng = random.Random(seed)
        self.count = 0
        self.tag = f"{os.getpid()}"

    def do(self, name: str, call: Callable[[], Any], **begin: Any) -> Any:
        self.acks.write({"begin": name, **begin})
        print("B", name, flush=True)
        result = call()
        tree = self.tree
        record = {"ack": name, "op": tree.last_op_id, "history": [op.op_id for op in tree.history()],
                  "digest": reads_digest(tree), "live": live_digest(tree)}
        if isinstance(result, dict):
            record.update(result)
        self.acks.write(record)
        print("A", name, flush=True)
        return result

    # --- what an action needs ----------------------------------------------------------------

    def name(self) -> str:
        self.count += 1
        return f"k{self.tag}x{self.count}"

    def text(self) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(4)) + f" {self.tag}.{self.count}"

    def live_keywords(self) -> list[str]:
        found, stack = [], [ROOT_ID]
        while stack:
            for child in self.tree.get_children(stack.pop()):
                found.append(child.id)
                stack.append(child.id)
        return found

    def live_infos(self) -> list[str]:
        live = []
        for iid in known_ids(self.tree)[1]:
            try:
                self.tree.get_info(iid)
            except KwtreeError:
                continue
            live.append(iid)
        return live

    def fresh_keyword(self, parent: str | None = None) -> str:
        return self.do("create_keyword", lambda: self.tree.create_keyword(self.name(), parent, llm_auto_place=False)).id

    def keyword(self) -> str:
        live = self.live_keywords()
        return self.rng.choice(live) if live else self.fresh_keyword()

    def fresh_info(self, keyword_ids: list[str] | None = None) -> str:
        return self.do("create_info", lambda: self.tree.create_info(self.text(), keyword_ids=keyword_ids or [])).id

    def info(self) -> str:
        live = self.live_infos()
        return self.rng.choice(live) if live else self.fresh_info()

    # --- the rows ----------------------------------------------------------------------------

    def write(self, row: str) -> None:
        t = self.tree
        if row == "create_keyword":
            parent = self.keyword() if self.rng.random() < 0.5 else None
            self.do(row, lambda: t.create_keyword(self.name(), parent, llm_auto_place=False))
        elif row == "create_keyword_auto_placed":  # the offline navigator places it
            self.do(row, lambda: t.create_keyword(self.name(), description=self.text()))
        elif row == "update_keyword":
            kid = self.keyword()
            self.do(row, lambda: t.update_keyword(kid, {"description": self.text()}, t.get_keyword(kid).version))
        elif row == "add_alias":
            kid = self.keyword()
            self.do(row, lambda: t.add_alias(kid, self.name()))
        elif row == "remove_alias":
            kid = self.keyword()
            alias = self.name()
            self.do("add_alias", lambda: t.add_alias(kid, alias))
            self.do(row, lambda: t.remove_alias(kid, alias))
        elif row == "move_keyword":
            moved, target = self.fresh_keyword(), self.keyword()
            self.do(row, lambda: t.move_keyword(moved, target if target != moved else ROOT_ID))
        elif row == "merge_keywords":
            src, dst = self.fresh_keyword(), self.fresh_keyword()
            self.fresh_info([src])
            self.do(row, lambda: t.merge_keywords(src, dst))
        elif row == "delete_keyword":
            doomed = self.fresh_keyword()
            self.fresh_keyword(doomed)
            self.do(row, lambda: t.delete_keyword(doomed, cascade=True,
                                                  info_policy=self.rng.choice(["reattach", "delete"])))
        elif row == "create_info":
            kid = self.keyword()
            self.do(row, lambda: t.create_info(self.text(), keyword_ids=[kid]))
        elif row == "create_info_auto_linked":  # the offline navigator picks the keywords
            self.keyword()
            self.do(row, lambda: t.create_info(self.text(), auto_link=True))
        elif row == "update_info":
            iid = self.info()
            self.do(row, lambda: t.update_info(iid, {"content": self.text()}))
        elif row == "delete_info":
            iid = self.fresh_info()
            self.do(row, lambda: t.delete_info(iid))
        elif row == "link_info":
            iid, kid = self.info(), self.fresh_keyword()
            self.do(row, lambda: t.link_info(iid, kid, "related"))
        elif row == "unlink_info":
            kid = self.keyword()
            iid = self.fresh_info([kid])
            self.do(row, lambda: t.unlink_info(iid, kid))
        elif row == "relate":
            a, b = self.keyword(), self.fresh_keyword()
            self.do(row, lambda: t.relate(a, b, "see_also", 0.5, "crash matrix"))
        elif row == "unrelate":
            a, b = self.keyword(), self.fresh_keyword()
            self.do("relate", lambda: t.relate(a, b))
            self.do(row, lambda: t.unrelate(a, b))
        elif row == "batch_create_keywords":
            specs = [{"name": self.name(), "ref": "head"}] + [{"name": self.name(), "parent_ref": "head"}
                                                              for _ in range(4)]
            self.do(row, lambda: t.batch_create_keywords(specs))
        elif row == "batch_create_infos":
            kid = self.keyword()
            self.do(row, lambda: t.batch_create_infos([{"content": self.text(), "keyword_ids": [kid]}
                                                       for _ in range(4)]))
        elif row == "undo":
            self.fresh_keyword()
            self.do(row, lambda: t.undo(t.last_op_id))
        elif row == "apply_reorganize_plan":
            for _ in range(3):
                self.fresh_keyword()
            self.do(row, lambda: t.apply_reorganize_plan(t.reorganize()))
        else:
            raise AssertionError(f"not a write row: {row}")

    def maintain(self, row: str) -> None:
        t = self.tree
        if row == "compact":
            self.fresh_info([self.keyword()])
            self.do("update_info", lambda: t.update_info(self.info(), {"content": self.text()}))
            keep = self.rng.random() < 0.5

            def compact() -> dict[str, Any]:
                t.compact(keep_history=keep)
                return {"rewrites": not keep}

            self.do(row, compact, live=live_digest(t))
        elif row == "snapshot":
            self.fresh_keyword()
            target = self.work / f"snap-{self.tag}-{self.count}.kwsnap"
            self.do(row, lambda: {"snapshot": t.snapshot(target)}, target=str(target))
        elif row == "restore":
            if not hasattr(self, "snap"):
                self.fresh_keyword()
                self.snap = self.work / f"base-{self.tag}.kwsnap"
                self.do("snapshot", lambda: {"snapshot": t.snapshot(self.snap)})
                self.snap_state = ([op.op_id for op in t.history()], reads_digest(t))
            self.fresh_info([self.keyword()])
            history, digest = self.snap_state

            def back() -> dict[str, Any]:
                t.restore(self.snap)
                return {"rewrites": True}

            self.do(row, back, history=history, digest=digest)
        elif row == "import_json":
            if not hasattr(self, "export"):
                self.fresh_info([self.keyword()])
                self.export = self.work / f"export-{self.tag}.json"
                t.export(self.export)
            target = self.work / f"import-{self.tag}-{self.count}"
            self.count += 1

            def load() -> dict[str, Any]:
                with KeywordTree.import_json(self.export, target, worker=False) as imported:
                    return {"import": str(target), "import_digest": reads_digest(imported)}

            self.do(row, load, target=str(target), export=str(self.export))
        elif row == "repair":
            self.fresh_keyword()
            self.do(row, lambda: {"repair_ok": t.repair().ok})
        elif row in ("worker_thread", "worker_process"):
            kid = self.keyword()
            self.do("create_info", lambda: t.create_info(self.text(), keyword_ids=[kid]))
            print(f"B {row}", flush=True)  # the worker is busy with what was just written
        else:
            raise AssertionError(f"not a row: {row}")


def child_main(data_dir: str, row: str, seed: str, ack_path: str, work: str) -> None:
    options: dict[str, Any] = {"durability": "full", "lock_timeout": 60, "worker": row == "worker_thread"}
    with KeywordTree(data_dir, **options) as tree:
        writer = Writer(tree, Acks(ack_path), Path(work), int(seed))
        print("ready", flush=True)
        while True:
            (writer.write if row in WRITES else writer.maintain)(row)


# --- the parent: kill, then check ------------------------------------------------------------


def read_records(path: Path) -> list[dict[str, Any]]:
    """The complete records of an acknowledgement file (a cut-off last line was never acked)."""
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().split(b"\n")[:-1]]


class Row:
    """One row of the matrix on one directory: the records of every run, and the checks."""

    def __init__(self, row: str, base: Path) -> None:
        self.row, self.base = row, base
        self.dir, self.work = base / "tree", base / "work"
        self.work.mkdir()
        with KeywordTree(self.dir, durability="full", worker=False) as tree:
            self.state = ([op.op_id for op in tree.history()], reads_digest(tree), live_digest(tree))
        self.records: list[dict[str, Any]] = []  # every run's acknowledgements, in order
        self.epoch = 0  # records from here on must still be in the log (none rewrote it since)
        self.rng = random.Random(f"crash matrix {row}")
        self.kills = 0
        self.imported: dict[str, str] = {}  # export file -> import_digest of it imported

    def run_once(self, children: Callable[..., Any]) -> None:
        acks = self.base / f"acks-{self.kills}.jsonl"
        child = children(__file__, self.dir, self.row, self.rng.randrange(1 << 30), acks, self.work)
        worker = None
        child.expect("ready")
        if self.row == "worker_process":
            worker = children(WORKER, self.dir)
        target, seen = self.rng.randint(1, 3), 0
        while seen < target:
            if child.readline() == f"B {self.row}":
                seen += 1
        # Kill at once (early in the action), or when the child prints its next line (the
        # action's ack) but at most a random fraction of a second later: late in the action.
        if self.rng.random() < 0.6:
            select.select([child.proc.stdout], [], [], self.rng.uniform(0, MAX_KILL_DELAY))
        if worker is not None:
            worker.kill()  # the kill this row is about, in the middle of its embedding loop
        child.kill()
        self.kills += 1
        records = read_records(acks)
        assert records, "the child was killed before it wrote its first record"
        self.check(records)

    def check(self, records: list[dict[str, Any]]) -> None:
        report = verify_directory(self.dir)
        assert report.ok, f"{self.row}: verify after the kill:\n{report.to_text()}"
        acked = [r for r in records if "ack" in r]
        in_flight = records[-1] if "begin" in records[-1] else None
        for n, record in enumerate(acked, start=len(self.records)):
            if record["ack"] in REWRITES and record.get("rewrites"):
                self.epoch = n  # records before it may be gone from the log
        self.records.extend(acked)
        if acked:
            self.state = (acked[-1]["history"], acked[-1]["digest"], acked[-1]["live"])
        before_history, before_digest, _ = self.state
        with KeywordTree(self.dir, read_only=True) as tree:
            history = [op.op_id for op in tree.history()]
            digest, live = reads_digest(tree), live_digest(tree)
            if history == before_history:
                assert digest == before_digest, f"{self.row}: the log is as acknowledged, the reads are not"
            elif in_flight is not None and in_flight["begin"] == "restore":
                assert (history, digest) == (in_flight["history"], in_flight["digest"]), \
                    f"{self.row}: a restore in flight left neither the old tree nor the snapshot's"
                self.epoch = len(self.records)
            elif in_flight is not None and in_flight["begin"] == "compact":
                assert live == in_flight["live"], f"{self.row}: a compaction in flight changed the live state"
                self.epoch = len(self.records)
            else:
                assert in_flight is not None and history[:-1] == before_history, (
                    f"{self.row}: after the kill the log holds {len(history)} operations, the child had "
                    f"acknowledged {len(before_history)} and had at most one in flight ({in_flight})")
            self.check_as_of(history, acked)
            self.check_acknowledged_work(in_flight, digest)
        self.state = (history, digest, live)

    def check_as_of(self, history: list[str], this_run: list[dict[str, Any]]) -> None:
        """Each acknowledged operation the log still holds as the child saw it: an as_of view
        there has the digest the child recorded (every one of this run, a sample of earlier
        runs' ones: those were checked after their own kill)."""
        for record in self.records[self.epoch:]:  # acknowledged after the last rewrite: still there
            assert history[:len(record["history"])] == record["history"], \
                f"{self.row}: acknowledged operation {record['op']} ({record['ack']}) is not in the log"
        still = [r for r in self.records if r["op"] and history[:len(r["history"])] == r["history"]]
        sample = self.rng.sample(still, min(AS_OF_SAMPLE, len(still)))
        now = [r for r in this_run if r in still]
        for record in {id(r): r for r in [*now, *sample]}.values():
            with KeywordTree(self.dir, as_of=record["op"]) as then:
                assert reads_digest(then) == record["digest"], \
                    f"{self.row}: as_of={record['op']} ({record['ack']}) differs from what the writer saw"

    def check_acknowledged_work(self, in_flight: dict[str, Any] | None, digest: str) -> None:
        """Acknowledged snapshots restore, acknowledged imports open, to what the child saw (a
        snapshot in flight, if its file exists, to the tree now; an import in flight, see
        ``check_import_in_flight``); repair found nothing to repair in a healthy log; after a
        killed embedding worker every info gets embedded."""
        if in_flight is not None and in_flight["begin"] == "import_json":
            self.check_import_in_flight(in_flight["export"], Path(in_flight["target"]))
        snapshots = []  # (archive, the digest it must restore to)
        if in_flight is not None and in_flight["begin"] == "snapshot" and Path(in_flight["target"]).exists():
            snapshots.append((in_flight["target"], digest))  # a snapshot in flight is whole, or absent
        for record in self.records[-3:]:
            assert record.get("repair_ok", True), f"{self.row}: repair() of a healthy log reported errors"
            if record.get("snapshot"):
                snapshots.append((record["snapshot"], record["digest"]))
                record["snapshot"] = None  # checked once
            if record.get("import"):
                assert verify_directory(record["import"]).ok
                with KeywordTree(record["import"], read_only=True) as imported:
                    assert reads_digest(imported) == record["import_digest"], f"{self.row}: import {record['import']}"
        for n, (archive, expected) in enumerate(snapshots):
            target = self.base / f"restored-{self.kills}-{n}"
            restore(archive, target)
            with KeywordTree(target, read_only=True) as restored:
                assert reads_digest(restored) == expected, f"{self.row}: snapshot {archive}"
        if self.row.startswith("worker"):
            with KeywordTree(self.dir, durability="none") as again:  # its worker takes over expired leases
                status = again.outbox_status()
                assert status["dead"] == 0, status
                if self.row == "worker_process":  # the killed process held 1-second leases
                    assert again.wait_indexed(LIMIT), again.outbox_status()
                    for iid in known_ids(again)[1]:
                        info = again.get_info(iid)
                        assert iid in {h.info.id for h in again.recall(info.content, k=1000, mode="vector")}, \
                            f"{self.row}: info {iid} was never embedded after the worker was killed"
                for hit in again.recall("cats python coffee", k=50, mode="vector"):
                    assert hit.info == again.get_info(hit.info.id)

    def check_import_in_flight(self, export: str, target: Path) -> None:
        """The target of a killed import holds the whole import (the same import_json then
        refuses it as not empty), or the same import_json run again succeeds; either way it
        verifies clean and opens to the state of ``export`` imported."""
        try:
            KeywordTree.import_json(export, target, worker=False).close()
        except InvalidInputError as exc:
            assert "not empty" in str(exc), f"{self.row}: running the killed import again: {exc}"
        report = verify_directory(target)
        assert report.ok, f"{self.row}: verify of the import in flight's target:\n{report.to_text()}"
        if export not in self.imported:  # what an import of this export gives, once per export
            with KeywordTree.import_json(export, self.base / f"imported-{len(self.imported)}",
                                         worker=False) as reference:
                self.imported[export] = import_digest(reference)
        with KeywordTree(target, read_only=True) as imported:
            assert import_digest(imported) == self.imported[export], \
                f"{self.row}: the import in flight's target {target} differs from the export imported"


#: The ``kwtree worker`` process of the worker_process row, with short leases so that the next
#: worker takes over what it held without a long wait.
WORKER = """
import sys
from kwtree.cli.main import main
main(["worker", sys.argv[1], "--lease", "1"])
"""


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS)
def test_sigkill_during(row: str, tmp_path: Path, children: Callable[..., Any]) -> None:
    matrix = Row(row, tmp_path)
    for _ in range(KILLS_PER_ROW):
        matrix.run_once(children)
    assert matrix.kills == KILLS_PER_ROW


def test_the_thorough_profile_kills_at_least_200_times() -> None:
    assert len(ROWS) * THOROUGH_KILLS_PER_ROW >= 200


if __name__ == "__main__":
    child_main(*sys.argv[1:])
