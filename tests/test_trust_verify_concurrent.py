"""B17: verify run while other processes write never cries wolf.

Writers in other processes append, start and seal small segments, and compact the log while
this process verifies it again and again. Every finding a concurrent verify reports (error or
warning) must be one a quiet verify of the finished directory reports too: a user told
"operations are lost" would restore a backup for nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from helpers import THOROUGH
from hypothesis import given, settings
from hypothesis import strategies as st

from kwtree import KeywordTree, verify_directory
from kwtree.ops.verify import Report

#: Examples of the property: each runs several processes for a few seconds.
EXAMPLES = 30 if THOROUGH else 3

WRITER = """
import random, sys
from kwtree import KeywordTree
path, seed, count, compact_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
with KeywordTree(path, durability="none", worker=False, lock_timeout=60) as tree:
    kids = []
    print("ready", flush=True)
    for step in range(count):
        roll = rng.random()
        if roll < 0.3 or not kids:
            kids.append(tree.create_keyword(f"k{seed}-{step}", llm_auto_place=False).id)
        elif roll < 0.8:
            tree.create_info(f"memory {seed} {step} " + "x" * rng.randrange(200), keyword_ids=[rng.choice(kids)])
        else:
            kid = rng.choice(kids)
            try:
                tree.update_keyword(kid, {"description": f"d{step}"}, tree.get_keyword(kid).version)
            except Exception:
                pass  # another writer's compaction or a version race: not what this test is about
        if compact_every and step and step % compact_every == 0:
            tree.compact(keep_history=bool(rng.getrandbits(1)))
print("done", flush=True)
"""


def _codes(report: Report) -> set[tuple[str, str]]:
    return {(f.severity, f.code) for f in report.findings if f.severity in ("error", "warning")}


def _run(children, path: Path, writers: int, segment_bytes: int, count: int, compact_every: int) -> list[Report]:
    with KeywordTree(path, durability="none", worker=False, segment_bytes=segment_bytes) as tree:
        tree.create_keyword("start", llm_auto_place=False)
    procs = [children(WRITER, path, seed, count, compact_every if seed == 0 else 0) for seed in range(writers)]
    for proc in procs:
        proc.expect("ready")
    reports = []
    while any(proc.proc.poll() is None for proc in procs) or not reports:
        reports.append(verify_directory(path))
    for proc in procs:
        assert "done" in proc.finish()
    return reports


def test_the_issue_repro_verify_beside_a_writer_of_4_kib_segments_reports_no_missing_segment(children) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree"
        reports = _run(children, path, 1, 4096, 600, 0)
        quiet = verify_directory(path)
    assert quiet.ok and quiet.segments > 20, quiet.to_text()
    wrong = [r for r in reports if _codes(r) - _codes(quiet)]
    assert not wrong, f"{len(wrong)} of {len(reports)} concurrent verifies cried wolf:\n{wrong[0].to_text()}"


@pytest.mark.slow
@settings(max_examples=EXAMPLES)
@given(writers=st.integers(1, 4), segment_bytes=st.sampled_from([4096, 16384, 1 << 20]),
       compact_every=st.sampled_from([0, 40, 150]))
def test_a_verify_beside_writers_and_compaction_reports_nothing_a_quiet_verify_would_not(
        writers: int, segment_bytes: int, compact_every: int) -> None:
    from helpers import Child

    started: list[Child] = []

    def start(code: str, *args: object) -> Child:
        started.append(Child(code, *args))
        return started[-1]

    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "tree"
            reports = _run(start, path, writers, segment_bytes, 250, compact_every)
            quiet = verify_directory(path)
            assert quiet.ok, quiet.to_text()
            for report in reports:
                extra = _codes(report) - _codes(quiet)
                assert not extra, f"a concurrent verify reported {sorted(extra)}:\n{report.to_text()}"
    finally:
        for child in started:
            child.cleanup()
