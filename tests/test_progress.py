"""Progress of long work: every long call tells a ``progress`` callback how far it is
(``kwtree.progress``), and every long ``kwtree`` command shows it on stderr — bars on a
terminal, plain lines in a pipe, nothing with ``--quiet`` or ``--json``.

Each test reads the reports a real call made on a real tree; none asserts on time.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from kwtree import KeywordTree
from kwtree.cli.main import main
from kwtree.cli.worker import serve_outbox
from kwtree.errors import InvalidInputError
from kwtree.progress import Progress, Ticker

INFOS = 300


class Reports(list[Progress]):
    """A progress callback that keeps every report."""

    def __call__(self, report: Progress) -> None:
        self.append(report)

    def of(self, task: str) -> list[Progress]:
        """The reports of the last run of ``task``, checked to keep the module's promises."""
        runs: list[list[Progress]] = []
        for report in self:
            if report.task == task:
                if report.done == 0 and not report.finished:
                    runs.append([])
                assert runs, f"{task!r} was reported before it began: {report}"
                runs[-1].append(report)
        assert runs, f"no report of {task!r} among {sorted({r.task for r in self})}"
        run = runs[-1]
        done = [report.done for report in run]
        assert done == sorted(done), f"{task!r} went backwards: {done}"
        assert not any(report.finished for report in run[:-1])
        last = run[-1]
        assert last.finished and last.done == last.total, last
        return run


def build(directory: Path, **options: object) -> list[str]:
    with KeywordTree(directory, durability="none", worker=False, **options) as tree:
        topic = tree.create_keyword("Topic", llm_auto_place=False).id
        infos = tree.batch_create_infos([{"content": f"memory number {n} about tea and travel", "keyword_ids": [topic]}
                                         for n in range(INFOS)])
        return [info.id for info in infos]


def test_a_ticker_reports_first_and_last_in_order_and_a_failing_callback_never_stops_the_work() -> None:
    reports = Reports()
    with Ticker(reports, "counting", 1000, "things") as tick:
        for _ in range(1000):
            tick.add()
    assert reports.of("counting")[-1].done == 1000
    assert str(reports[-1]) == "counting: 1,000/1,000 things (100%), done"

    def broken(report: Progress) -> None:
        raise RuntimeError("the display went away")

    with pytest.warns(RuntimeWarning, match="the progress callback failed on 'counting'"), \
            Ticker(broken, "counting", 3, "things") as tick:
        for _ in range(3):
            tick.add()
    assert tick.done == 3  # (reported once, then left alone)


def test_an_estimated_total_is_corrected_by_the_last_report_and_a_task_left_unfinished_says_nothing_more() -> None:
    reports = Reports()
    with Ticker(reports, "copying", 10, "rows") as tick:
        tick.add(7)
    assert (reports[-1].done, reports[-1].total, reports[-1].finished) == (7, 7, True)
    reports.clear()
    with Ticker(reports, "waiting", None, "texts") as tick:
        tick.remaining(5)  # learned what there is to do
        tick.remaining(8)  # more was added meanwhile
        tick.remaining(2)
        tick.leave_unfinished()
    assert [r.finished for r in reports] == [False] * len(reports) and tick.total == 8 and tick.done == 6


def test_progress_must_be_callable(tree_dir: Path) -> None:
    with pytest.raises(InvalidInputError, match="progress must be a callable"):
        KeywordTree(tree_dir, progress=3)  # type: ignore[arg-type]


def test_bulk_indexing_compaction_export_and_reindex_report_their_progress(tree_dir: Path, tmp_path: Path) -> None:
    reports = Reports()
    build(tree_dir, progress=reports)
    assert reports.of("indexing full text")[-1].total == INFOS + 1  # (the infos and their keyword)
    with KeywordTree(tree_dir, durability="none", worker=False, progress=reports) as tree:
        tree.compact()
        assert reports.of("rewriting the log")[-1].total == tree.tree_metrics()["infos"] * 2 + 2  # +links, keywords
        tree.compact(keep_history=True)
        assert reports.of("rewriting the log")[-1].unit == "operations"
        done = tree.export(tmp_path / "tree.json")
        assert reports.of("exporting")[-1].done == done["keywords"] + done["infos"] + done["links"] + 1  # + root
        tree.export(tmp_path / "tree.md", format="markdown")
        assert reports.of("exporting")[-1].done == 1 and reports.of("exporting")[-1].unit == "keywords"
        reindexed = tree.reindex()
        assert reindexed["indexed"] == INFOS + 1 and reindexed["embedded"] == 0
        assert reports.of("indexing full text")[-1].done == INFOS + 1
        assert tree.recall("number 7 about tea", 1, min_score=0)  # the index it rebuilt answers


def test_reindex_with_vectors_embeds_every_text_again_and_reports_it(tree_dir: Path) -> None:
    reports = Reports()
    build(tree_dir)
    with KeywordTree(tree_dir, durability="none", worker=False, progress=reports) as tree:
        tree.wait_indexed()
        done = tree.reindex(vectors=True)
        assert done["embedded"] == INFOS + 1
        assert reports.of("embedding")[-1].done == INFOS + 1
        assert tree.outbox_status()["pending"] == 0
        assert tree.recall("memory number 12 about tea", 1, mode="vector", min_score=0)


def test_import_restore_migrate_forget_and_the_worker_report_their_progress(tree_dir: Path, tmp_path: Path) -> None:
    import kwtree
    from kwtree.ops.migrate import migrate

    ids = build(tree_dir)
    with KeywordTree(tree_dir, durability="none", worker=False) as tree:
        tree.export(tmp_path / "tree.json")
        archive = tree.snapshot(tmp_path / "tree.kwsnap")
    reports = Reports()
    with KeywordTree.import_json(tmp_path / "tree.json", tmp_path / "imported", durability="none", worker=False,
                                 progress=reports) as imported:
        assert imported.tree_metrics()["infos"] == INFOS
    assert reports.of("checking the import")[-1].done == 1 + 1 + INFOS * 2  # root, keyword, infos, links
    kwtree.restore(archive, tmp_path / "restored", progress=reports)
    assert reports.of("checking the snapshot")[-1].done == os.path.getsize(tree_dir / "manifest.json") + sum(
        path.stat().st_size for path in (tmp_path / "restored" / "log").iterdir())
    migrated = migrate(tmp_path / "restored", tmp_path / "migrated", progress=reports)
    assert reports.of("copying the log")[-1].done == migrated.operations
    with KeywordTree(tree_dir, durability="none", worker=False, progress=reports) as tree:
        tree.forget(ids[3])
        assert reports.of("rewriting the log")[-1].done == len(tree.history())
    worked = serve_outbox(tree_dir, once=True, progress=reports)
    assert worked > 0 and reports.of("embedding")[-1].done == worked


def test_upgrade_reports_the_segments_it_rewrites(tree_dir: Path) -> None:
    from kwtree.engine.events import with_checksum, without_checksum, without_prev
    from kwtree.ops.upgrade import upgrade_directory
    from kwtree.stores.manifest import Manifest

    build(tree_dir)
    for path in (tree_dir / "log").glob("*.jsonl"):  # as kwtree wrote it before the hash chain (format 2)
        operations, rows = [], b""
        for line in path.read_bytes().rstrip(b"\0").splitlines(keepends=True):
            rows += line
            if b'"end":' in line:
                operations.append(rows)
                rows = b""
        path.write_bytes(b"".join(with_checksum(without_prev(without_checksum(op))) for op in operations))
    manifest = Manifest.load(tree_dir)
    type(manifest)(2, manifest.created_at, manifest.replica_id, manifest.segment_bytes,
                   manifest.file_mode).save(tree_dir)
    reports = Reports()
    done = upgrade_directory(tree_dir, progress=reports)
    assert done.format_after == 3 and reports.of("rewriting the log")[-1].done == done.segments


# --- the command -------------------------------------------------------------------------------------------


@pytest.fixture
def loaded(tree_dir: Path, tmp_path: Path) -> Path:
    outline = {"keywords": [{"ref": "t", "name": "Topic"}],
               "infos": [{"content": f"memory number {n}", "keywords": ["t"]} for n in range(INFOS)]}
    (tmp_path / "outline.json").write_text(json.dumps(outline))
    return tmp_path / "outline.json"


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_long_commands_print_plain_lines_in_a_pipe_and_nothing_with_quiet_or_json(
        tree_dir: Path, tmp_path: Path, loaded: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KWTREE_PROGRESS_EVERY", "0")  # every task shown at once
    out, err = run(capsys, "load", tree_dir, loaded)
    assert out.startswith("loaded 1 keywords, 300 infos") and "kwtree:" not in out
    assert f"kwtree: indexing full text: {INFOS + 1:,}/{INFOS + 1:,} texts (100%), done\n" in err
    out, err = run(capsys, "compact", tree_dir)
    assert out.startswith("compacted") and err.startswith("kwtree: rewriting the log: 0")
    assert err.endswith("entities (100%), done\n")
    _, err = run(capsys, "compact", tree_dir, "--quiet")
    assert err == ""
    out, err = run(capsys, "export", tree_dir, tmp_path / "tree.json", "--json")
    assert err == "" and json.loads(out)["infos"] == INFOS
    _, err = run(capsys, "reindex", tree_dir)
    assert "kwtree: indexing full text: 301/301 texts (100%), done" in err
    monkeypatch.setenv("KWTREE_PROGRESS_EVERY", "60")  # quick work stays as quiet as before
    out, err = run(capsys, "reindex", tree_dir)
    assert err == "" and out.startswith(f"reindexed {tree_dir}: {INFOS + 1:,} text(s) indexed, 0 embedded")


def test_a_bad_progress_interval_is_an_error(tree_dir: Path, loaded: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KWTREE_PROGRESS_EVERY", "soon")
    assert main(["load", str(tree_dir), str(loaded)]) == 1
    assert "KWTREE_PROGRESS_EVERY must be a number of seconds >= 0, got 'soon'" in capsys.readouterr().err
    assert not tree_dir.exists()  # refused before anything was created


def test_the_worker_command_shows_its_progress(tree_dir: Path, loaded: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    run(capsys, "load", tree_dir, loaded, "--no-wait")  # the embedding left to the worker
    monkeypatch.setenv("KWTREE_PROGRESS_EVERY", "0")
    out, err = run(capsys, "worker", tree_dir, "--once")
    embedded = int(out.split()[1])
    assert embedded > 0 and f"kwtree: embedding: {embedded:,}/{embedded:,} texts (100%), done\n" in err


def test_load_returns_with_its_texts_embedded_and_shows_it(tree_dir: Path, loaded: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KWTREE_PROGRESS_EVERY", "0")
    _, err = run(capsys, "load", tree_dir, loaded)
    assert "kwtree: embedding: " in err and "(100%), done\n" in err
    with KeywordTree(tree_dir, read_only=True) as tree:
        assert tree.outbox_status()["pending"] + tree.outbox_status()["leased"] == 0
        assert tree.recall("memory number 7", k=1, mode="vector")


def test_on_a_terminal_the_progress_is_a_bar(tree_dir: Path, loaded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "load", tree_dir, loaded)
    pid, fd = pty.fork()
    if pid == 0:  # the child: kwtree on a terminal (stdout and stderr are the pty)
        os.environ["KWTREE_PROGRESS_EVERY"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "kwtree", "reindex", str(tree_dir)])
    shown = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child exited: the terminal is gone
            break
        if not chunk:
            break
        shown += chunk
    _, status = os.waitpid(pid, 0)
    text = shown.decode()
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "indexing full text" in text and "━" in text and f"{INFOS + 1}/{INFOS + 1}" in text
    assert "kwtree: indexing" not in text  # bars, not the plain lines of a pipe
    assert f"reindexed {tree_dir}" in text


def test_a_piped_real_process_keeps_stdout_clean(tree_dir: Path, loaded: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "load", tree_dir, loaded)
    env = {**os.environ, "KWTREE_PROGRESS_EVERY": "0"}
    done = subprocess.run([sys.executable, "-m", "kwtree", "reindex", str(tree_dir)], capture_output=True,
                          text=True, env=env, timeout=120, check=True)
    assert done.stdout.count("\n") == 1 and done.stdout.startswith("reindexed")
    assert done.stderr.startswith("kwtree: indexing full text: 0/301 texts (0%)\n")
