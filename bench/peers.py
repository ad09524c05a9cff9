"""kwtree next to the embedded stores a user would otherwise pick, on one workload, by one method.

The peers (issue 6): **Chroma** (embedded ``PersistentClient``, HNSW) for vector add and query,
and **SQLite with sqlite-vec and FTS5**, the store a user would otherwise hand-roll. Everything
comes from /work/shared/peers (read-only, not copied here): the workload generator, each peer's
``Store`` adapter and the driver ``bench.py``. kwtree gets the same kind of adapter,
``bench/peer_kwtree.py``, so that the unmodified driver measures all three the same way; the
driver runs through ``bench/peer_driver.py``, which only keeps the raw latencies it summarises.

- **Workload:** ``gen_workload.py`` writes it once to ``bench/.cache/peers-data`` (not in git):
  100,500 docs of 20-40 Zipf-drawn words with 384-d low-rank vectors, 1,000 query vectors and
  two-word query texts, and the exact top 10 for N = 10,000 and 100,000.
- **Venvs:** each peer runs in its own venv, ``bench/.cache/venv-chroma`` and
  ``bench/.cache/venv-sqlitevec``, made here from PyPI when missing, with the versions the
  peers' README measured. A peer whose venv cannot be made is skipped with one line. The
  measured runs need no network.
- **Phases**, each in a fresh process (``bench.py``): ``build`` (bulk insert into a new store,
  timed until it answers queries), ``cold`` (import, open and first vector query; RSS),
  ``query`` (vector top 10 with recall@10 against the exact top 10; two-word keyword queries
  as AND and OR), ``single`` (a copy of the 10k store takes 500 one-doc inserts, each durable
  when it returns), and in the full run the fsync-family calls per single insert counted
  with ``strace``. The stores take turns within each phase, so the ratios compare figures
  measured minutes apart at most.

    .venv/bin/python bench/peers.py [--quick] [--work DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stats import summary

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS_DIR = ROOT.parent / "shared" / "peers"
CACHE = BENCH / ".cache"
DATA = CACHE / "peers-data"
DRIVER = BENCH / "peer_driver.py"
STORES = ("kwtree", "chroma", "sqlitevec")
#: Each peer's venv under bench/.cache and the versions the peers' README measured.
PEER_VENVS = {
    "chroma": ("venv-chroma", ("chromadb==1.5.9", "numpy==2.4.6")),
    "sqlitevec": ("venv-sqlitevec", ("sqlite-vec==0.1.9", "pysqlite3-binary==0.5.4.post2", "numpy==2.4.6")),
}
LABELS = {"kwtree": "kwtree", "chroma": "chromadb", "sqlitevec": "sqlite-vec + FTS5"}
#: The driver's result keys, as the markdown names them.
MODES = {"vec:store": "vector store", "vec:recall": 'recall(mode="vector")', "vec:None": "vector",
         "fts:and": "keyword AND", "fts:or": "keyword OR"}
#: kwtree's single inserts run twice: with its defaults, and embedding before the write returns.
KWTREE_EMBED_VARIANTS = ("async", "inline")
SMALL = 10_000  # the size the single inserts copy (the driver's "10k store")
TIMEOUT_S = 1_800
_SYNC = re.compile(r"\b(fsync|fdatasync|sync_file_range|msync|syncfs)\((\d+)(<[^>]*>)?")


@dataclass(frozen=True)
class Plan:
    """How much of each phase to run. ``queries`` maps N to the number of queries per pass."""

    sizes: tuple[int, ...]
    builds: int
    colds: int
    queries: dict[int, int]
    passes: int
    singles: int
    strace: bool


#: About 60 s here once the workload and venvs exist.
QUICK = Plan(sizes=(SMALL,), builds=1, colds=1, queries={SMALL: 200}, passes=1, singles=1, strace=False)
#: About 5 minutes on a quiet machine here; Chroma's and kwtree's 100k graph builds are half
#: of it. A query round is one vector and two keyword queries: ~160 ms for Chroma at 100k
#: (its keyword filter scans), ~70 ms for sqlite-vec (brute force), hence 200 queries there.
FULL = Plan(sizes=(SMALL, 100_000), builds=1, colds=3, queries={SMALL: 500, 100_000: 200}, passes=1,
            singles=1, strace=True)
#: The first timed queries after open are summarised apart as well, when that changes the p99 by
#: more than 2x: kwtree's worker thread still runs its repair scan then.
EARLY_QUERIES = 50


def plan(quick: bool) -> Plan:
    return QUICK if quick else FULL


# --- setup -------------------------------------------------------------------------------------


def workload() -> Path | str:
    """The workload directory, generated on first use; or why there is none (a line to print)."""
    if (DATA / "meta.json").exists() and (DATA / "gt_100000.npy").exists():
        return DATA
    temporary = DATA.with_name(DATA.name + ".tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    print(f"peers: generating the workload into {DATA} (once)", flush=True)
    done = subprocess.run([sys.executable, str(PEERS_DIR / "gen_workload.py"), str(temporary)],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        shutil.rmtree(temporary, ignore_errors=True)
        return f"gen_workload.py failed: {_tail(done.stderr)}"
    shutil.rmtree(DATA, ignore_errors=True)
    temporary.rename(DATA)
    return DATA


def peer_python(peer: str) -> Path | str:
    """The python of the peer's venv, made (pinned versions, from PyPI) when missing or made
    for other versions; or why it cannot be made (a line to print)."""
    name, requirements = PEER_VENVS[peer]
    directory = CACHE / name
    python = directory / "bin" / "python"
    marker = directory / "peers-requirements.txt"  # written last: a venv without it is incomplete
    wanted = "\n".join(requirements) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    shutil.rmtree(directory, ignore_errors=True)
    print(f"peers: creating {directory} ({' '.join(requirements)})", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True, capture_output=True, text=True,
                       timeout=600)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *requirements], check=True,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(directory, ignore_errors=True)
        detail = _tail(getattr(exc, "stderr", None) or str(exc))
        return f"could not create {directory}: {detail}"
    marker.write_text(wanted)
    return python


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


# --- running the driver ---------------------------------------------------------------------------


def _drive(python: Path | str, store: str, phase: str, args: list[str], env: dict[str, str],
           strace_log: Path | None = None) -> dict:
    """One driver process; its RESULT record with ``wall_s``. Raises RuntimeError if it fails."""
    command = [str(python), str(DRIVER), str(PEERS_DIR), store, phase, *args]
    if strace_log is not None:
        command = ["strace", "--seccomp-bpf", "-f", "-qq", "-y", "-o", str(strace_log), "-e",
                   "trace=fsync,fdatasync,sync_file_range,msync,syncfs,access,faccessat,faccessat2", *command]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    wall = time.perf_counter() - started
    records = [json.loads(line[len("RESULT "):]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not records:
        raise RuntimeError(f"{store} {phase} failed (exit {done.returncode}): {_tail(done.stderr)}")
    record = records[-1]
    record.update(store=store, wall_s=wall, stderr_lines=len(done.stderr.splitlines()))
    return record


def _sync_calls(strace_log: Path) -> tuple[int, dict[str, int]]:
    """fsync-family calls between the driver's single_begin and single_end markers, and per
    call and file name."""
    inside, calls, by_file = False, 0, {}
    with strace_log.open(errors="replace") as lines:
        for line in lines:
            if "__peer_mark_single_begin" in line:
                inside = True
            elif "__peer_mark_single_end" in line:
                break
            elif inside and "resumed>" not in line and (match := _SYNC.search(line)):
                calls += 1
                path = (match.group(3) or "<?>").strip("<>")
                name = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27,}", "<uuid>", os.path.basename(path))
                key = f"{match.group(1)} {name}"
                by_file[key] = by_file.get(key, 0) + 1
    return calls, by_file


def _environments() -> dict[str, dict[str, str]]:
    base = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    kwtree = base | {"PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)])}
    return {"kwtree": kwtree, "chroma": base, "sqlitevec": base}


def run(quick: bool, work: Path | None = None) -> dict:
    """Every phase for kwtree and each peer that could be set up. Returns the plan, the skipped
    peers with why, every driver record (raw latencies included) and the summary the markdown
    prints; or ``{"skipped": why}`` when /work/shared/peers or the workload is unavailable."""
    if not PEERS_DIR.is_dir():
        print(f"peers: skipped, {PEERS_DIR} not found", flush=True)
        return {"skipped": f"{PEERS_DIR} not found"}
    data = workload()
    if isinstance(data, str):
        print(f"peers: skipped, {data}", flush=True)
        return {"skipped": data}
    chosen = plan(quick)
    pythons: dict[str, Path | str] = {"kwtree": sys.executable}
    skipped: dict[str, str] = {}
    for peer in PEER_VENVS:
        found = peer_python(peer)
        if isinstance(found, str):
            skipped[peer] = found
            print(f"peers: skipping {peer}: {found}", flush=True)
        else:
            pythons[peer] = found
    stores = [store for store in STORES if store in pythons]
    envs = _environments()
    strace = chosen.strace and shutil.which("strace") is not None
    records: list[dict] = []
    errors: list[str] = []

    def drive(store: str, phase: str, args: list[str], variant: str | None = None,
              strace_log: Path | None = None) -> dict | None:
        env = envs[store] if variant is None else envs[store] | {"PEER_KWTREE_EMBED": variant}
        try:
            record = _drive(pythons[store], store, phase, args, env, strace_log)
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            errors.append(str(exc))
            print(f"peers: {exc}", flush=True)
            return None
        record["variant"] = variant
        records.append(record)
        print(f"peers: {store} {phase} n={record['n']:,}{'' if variant is None else ' ' + variant}: "
              f"{record['wall_s']:.1f} s", flush=True)
        return record

    with tempfile.TemporaryDirectory(dir=work) as temporary:
        root = Path(temporary)
        built: dict[tuple[str, int], Path] = {}
        for n in chosen.sizes:
            common = ["--data", str(data), "--n", str(n)]
            for build in range(chosen.builds):
                for store in stores:
                    directory = root / f"{store}-{n}-{build}"
                    if drive(store, "build", [*common, "--dir", str(directory)]) and build == 0:
                        built[(store, n)] = directory
                    elif build > 0:
                        shutil.rmtree(directory, ignore_errors=True)
            ready = [store for store in stores if (store, n) in built]
            for _ in range(chosen.colds):
                for store in ready:
                    drive(store, "cold", [*common, "--dir", str(built[(store, n)])])
            for store in ready:
                drive(store, "query", [*common, "--dir", str(built[(store, n)]), "--nq", str(chosen.queries[n]),
                                       "--passes", str(chosen.passes)])
            if n != SMALL:
                continue
            scratch = root / "single"
            scratch.mkdir(exist_ok=True)
            for _ in range(chosen.singles):
                for store in ready:
                    for variant in (KWTREE_EMBED_VARIANTS if store == "kwtree" else (None,)):
                        drive(store, "single", [*common, "--dir", str(built[(store, n)]), "--work", str(scratch)],
                              variant)
            if strace:
                for store in ready:
                    log = root / f"{store}.strace"
                    record = drive(store, "single", [*common, "--dir", str(built[(store, n)]), "--work", str(scratch)],
                                   "async" if store == "kwtree" else None, strace_log=log)
                    if record is not None:
                        calls, by_file = _sync_calls(log)
                        record.update(phase="single_strace", sync_calls=calls,
                                      sync_calls_per_insert=calls / record["inserts"], sync_by_file=by_file)
                    log.unlink(missing_ok=True)
    return {"plan": dataclasses.asdict(chosen), "stores": stores, "skipped_peers": skipped, "errors": errors,
            "summary": summarise(records), "records": records}


# --- summary -----------------------------------------------------------------------------------------


def _raw_by_result(record: dict) -> dict[str, list[float]]:
    """The query phase's raw latencies per result key ("vec:<mode>", "fts:<mode>"), all passes
    pooled: the driver summarises each mode's passes in turn, in its results' order."""
    keys, passes, raw = list(record["results"]), record["passes"], record.get("raw_ms", [])
    if len(raw) != len(keys) * passes:
        return {}
    return {key: [ms for lat in raw[i * passes:(i + 1) * passes] for ms in lat] for i, key in enumerate(keys)}


def summarise(records: list[dict]) -> dict[str, dict[str, dict]]:
    """Per store and N (as a string, for JSON): the figures the table prints."""
    out: dict[str, dict[str, dict]] = {}
    for record in records:
        out.setdefault(record["store"], {}).setdefault(str(record["n"]), {})
    for store, sizes in out.items():
        for size, figures in sizes.items():
            mine = [r for r in records if r["store"] == store and str(r["n"]) == size]
            builds = [r for r in mine if r["phase"] == "build"]
            if builds:
                figures["build"] = {
                    "docs_per_s": statistics.median(r["docs_per_s"] for r in builds),
                    "docs_per_s_runs": [r["docs_per_s"] for r in builds],
                    "insert_s": statistics.median(r["insert_s"] for r in builds),
                    "disk_mb": builds[0]["disk_mb"], "files": builds[0]["files"],
                    "hwm_mb": builds[0]["hwm_mb"], "extras": builds[0].get("extras") or {},
                    "versions": builds[0].get("versions") or {},
                }
            colds = [r for r in mine if r["phase"] == "cold"]
            if colds:
                figures["cold"] = {
                    "import_s": statistics.median(r["import_s"] for r in colds),
                    "open_plus_first_query_s": statistics.median(r["open_plus_first_query_s"] for r in colds),
                    "open_plus_first_query_runs_s": [r["open_plus_first_query_s"] for r in colds],
                    "rss_mb": statistics.median(r["rss_mb"] for r in colds),
                    "threads": colds[0]["threads"],
                }
            for record in (r for r in mine if r["phase"] == "query"):
                raw = _raw_by_result(record)
                figures["query"] = {
                    key: {**value, "summary_ms": summary(raw[key]) if key in raw else None,
                          "later_summary_ms": summary(raw[key][EARLY_QUERIES:])
                          if len(raw.get(key, ())) > 2 * EARLY_QUERIES else None}
                    for key, value in record["results"].items()}
                figures["query_run"] = {"nq": record["nq"], "passes": record["passes"],
                                        "rss_after_open_mb": record["rss_after_open_mb"],
                                        "rss_after_queries_mb": record["rss_mb"]}
            singles: dict[str, list[dict]] = {}
            for record in (r for r in mine if r["phase"] == "single"):
                singles.setdefault(record.get("variant") or "default", []).append(record)
            if singles:
                figures["single"] = {
                    variant: {
                        "summary_ms": summary([ms for r in runs for lat in r.get("raw_ms", []) for ms in lat]),
                        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
                        "p99_ms": statistics.median(r["p99_ms"] for r in runs),
                        "close_s": statistics.median(r["close_s"] for r in runs),
                        "last_doc_found": all(r["last_doc_found"] for r in runs),
                        "count_after_reopen": runs[0]["count_after_reopen"],
                    }
                    for variant, runs in singles.items()
                }
            for record in (r for r in mine if r["phase"] == "single_strace"):
                figures["fsyncs"] = {"per_insert": record["sync_calls_per_insert"], "by_file": record["sync_by_file"]}
    return out


# --- markdown ---------------------------------------------------------------------------------------


def _ms(stats: dict | None) -> str:
    if not stats:
        return "–"
    digits = 2 if stats["median"] < 10 else 1
    return " / ".join(f"{stats[key]:,.{digits}f}" for key in ("median", "p90", "p99", "max"))


def _insert_cell(store: str, figures: dict) -> str:
    singles = figures.get("single")
    if not singles:
        return "–"
    fsyncs = figures.get("fsyncs")
    synced = ""
    if fsyncs:
        count = fsyncs["per_insert"]
        shown = f"{count:.0f}" if abs(count - round(count)) < 0.005 else f"{count:.2f}"
        synced = f" ({shown} fsync{'' if shown == '1' else 's'})"
    if store != "kwtree":
        return _ms(singles["default"]["summary_ms"]) + synced
    parts = []
    if "async" in singles:
        parts.append(f"default: {_ms(singles['async']['summary_ms'])}{synced}")
    if "inline" in singles:
        parts.append(f"embed_async=False: {_ms(singles['inline']['summary_ms'])}")
    return " · ".join(parts)


def _vector_cell(store: str, query: dict) -> str:
    labels = {"vec:store": "vector store ", "vec:recall": "`recall(mode=\"vector\")` "}
    parts = []
    for key, value in query.items():
        if key.startswith("vec:"):
            label = labels.get(key, "") if store == "kwtree" else ""
            parts.append(f"{label}{_ms(value['summary_ms'])}, **{value['recall@10']:.3f}**")
    return " · ".join(parts) or "–"


def _keyword_cell(query: dict) -> str:
    def one(mode: str) -> str:
        value = query.get(f"fts:{mode}")
        if value is None:
            return "no AND mode" if mode == "and" else "–"
        return f"{_ms(value['summary_ms'])} ({value['avg_hits']:.1f} hits)"

    return f"{one('and')} ‖ {one('or')}"


def _row(store: str, n: int, figures: dict) -> str:
    build, cold, query = figures.get("build"), figures.get("cold"), figures.get("query", {})
    version = _version(store, build)
    bulk = "–" if not build else f"{build['docs_per_s']:,.0f}" + (f" ({build['insert_s']:.0f} s)" if n > SMALL else "")
    opened = "–" if not cold else f"{cold['import_s']:.2f} s; {1e3 * cold['open_plus_first_query_s']:,.0f} ms"
    rss = "–" if not cold else f"{cold['rss_mb']:,.0f} MB"
    disk = "–" if not build else f"{build['disk_mb']:,.0f} MB"
    return (f"| {version} | {n // 1000}k | {bulk} | {_insert_cell(store, figures) if n == SMALL else '–'} | "
            f"{_vector_cell(store, query)} | {_keyword_cell(query) if query else '–'} | {opened} | {rss} | {disk} |")


def _version(store: str, build: dict | None) -> str:
    versions = (build or {}).get("versions", {})
    if store == "kwtree":
        return f"kwtree {versions.get('kwtree', '')}".strip()
    if store == "chroma":
        return f"chromadb {versions.get('chromadb', '')}".strip()
    return f"sqlite-vec {versions.get('sqlite_vec', '').lstrip('v')} + FTS5 (SQLite {versions.get('sqlite', '?')})"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if not ours or not theirs:
        return "–"
    return f"{ours / theirs:.2f}x"


def _ratios(summary_: dict, n: int) -> list[str]:
    size = str(n)
    ours = summary_.get("kwtree", {}).get(size)
    if not ours:
        return []
    lines = []
    for peer in (p for p in STORES if p != "kwtree"):
        theirs = summary_.get(peer, {}).get(size)
        if not theirs:
            continue

        def get(figures: dict, *path: str) -> float | None:
            for key in path:
                if not isinstance(figures, dict) or key not in figures or figures[key] is None:
                    return None
                figures = figures[key]
            return figures  # type: ignore[return-value]

        vector = get(theirs, "query", "vec:None", "summary_ms", "median")
        parts = [
            f"bulk docs/s {_ratio(get(ours, 'build', 'docs_per_s'), get(theirs, 'build', 'docs_per_s'))}",
        ]
        if n == SMALL:
            parts.append("1-doc insert median " + _ratio(get(ours, "single", "async", "summary_ms", "median"),
                                                           get(theirs, "single", "default", "summary_ms", "median")))
        parts += [
            f"vector median {_ratio(get(ours, 'query', 'vec:store', 'summary_ms', 'median'), vector)} "
            f"(store; `recall()` {_ratio(get(ours, 'query', 'vec:recall', 'summary_ms', 'median'), vector)}), "
            f"recall@10 {get(ours, 'query', 'vec:store', 'recall@10') or 0:.3f} vs "
            f"{get(theirs, 'query', 'vec:None', 'recall@10') or 0:.3f}",
            "keyword OR median " + _ratio(get(ours, "query", "fts:or", "summary_ms", "median"),
                                          get(theirs, "query", "fts:or", "summary_ms", "median")),
            "open + 1st query " + _ratio(get(ours, "cold", "open_plus_first_query_s"),
                                         get(theirs, "cold", "open_plus_first_query_s")),
            f"RSS {_ratio(get(ours, 'cold', 'rss_mb'), get(theirs, 'cold', 'rss_mb'))}",
            f"disk {_ratio(get(ours, 'build', 'disk_mb'), get(theirs, 'build', 'disk_mb'))}",
        ]
        lines.append(f"- kwtree ÷ {LABELS[peer]} at {n // 1000}k: " + "; ".join(parts) + ".")
    return lines


def markdown(result: dict) -> str:
    title = "### Peers: kwtree next to Chroma and SQLite (sqlite-vec + FTS5), one workload, one driver"
    if "skipped" in result:
        return f"{title}\n\nSkipped: {result['skipped']}."
    chosen, summary_ = result["plan"], result["summary"]
    sizes = [int(n) for n in chosen["sizes"]]
    per_size = chosen["queries"]  # int keys as run() returns it, str keys once read back from JSON
    queries = ", ".join(f"{per_size.get(n, per_size.get(str(n))):,} at {n // 1000}k" for n in sizes)
    chroma_hnsw = summary_.get("chroma", {}).get(str(SMALL), {}).get("build", {}).get("extras", {}).get("hnsw_config")
    kwtree_build = summary_.get("kwtree", {})
    out = [
        title,
        "",
        "The shared peer workload (`/work/shared/peers`, generated once into `bench/.cache/peers-data`): docs of 20–40 "
        "Zipf-drawn words, 384-d low-rank vectors (hard for ANN: the 10th and 11th neighbours differ by 0.002 in "
        "cosine), two-word queries. Every store is driven by the peers' own `bench.py`, one fresh process per phase "
        f"(`bench/peer_kwtree.py` is kwtree's adapter). Latencies are ms, **median / p90 / p99 / max** of the raw "
        f"samples (queries per store: {queries}, {_passes(chosen['passes'])} after 10 warm-up queries; 500 single "
        "inserts into a copy of the 10k store, with the fsync-family calls per insert counted by strace); "
        "recall@10 is against the exact top 10. Bulk docs/s counts until the store answers queries (kwtree: log, "
        "vectors, hnswlib graph and full-text index). Cold is import; open + first vector query in a fresh process "
        "(page cache warm), RSS after them. Disk is allocated bytes after the build.",
        "",
        "| store | N | bulk docs/s | durable 1-doc insert ms | vector top 10 ms, recall@10 | keyword AND ‖ OR ms "
        "(avg hits) | cold: import; open + 1st query | RSS | disk |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in sizes:
        for store in result["stores"]:
            figures = summary_.get(store, {}).get(str(n))
            if figures:
                out.append(_row(store, n, figures))
    early = _early_lines(result["stores"], summary_, sizes)
    if early:
        out += ["", f"Where the first {EARLY_QUERIES} timed queries after open change the p99 by more than 2x "
                    "(kwtree: its worker thread still runs the repair scan over every info then):", "", *early]
    out += ["", "Ratios in the same run (throughput above 1x and times or sizes below 1x favour kwtree):", ""]
    for n in sizes:
        out += _ratios(summary_, n)
    out += [
        "",
        "Configurations, none tuned: Chroma's HNSW cosine with its defaults "
        f"({_hnsw(chroma_hnsw) if chroma_hnsw else 'M=16, ef_construction=100, ef_search=100'}), batches of its "
        "maximum `add()`; its keyword search is `where_document` `$contains` (a trigram substring filter, unranked). "
        "sqlite-vec `vec0` cosine (brute force) with FTS5 `ORDER BY rank` (BM25) in one file, SQLite's defaults "
        "(rollback journal, synchronous=FULL), one transaction for the bulk load. kwtree with its defaults "
        "(`durability=\"full\"`, the embedding worker thread): hnswlib cosine M=16, ef_construction=200, ef=128; "
        "BM25 over tantivy; an embedder that serves the workload's own vectors for its texts. kwtree's keyword row "
        "is `recall(mode=\"bm25\")`, which ranks by any of the query's words: kwtree has no mode that requires all "
        "of them, so it has no AND figure.",
        "",
        "kwtree's vector columns: *vector store* is its hnswlib store's top 10 for the query vector; "
        "`recall(mode=\"vector\")` is the public call end to end (50 candidates, each checked current, fused with "
        "the tree's scores). Its durable insert is `create_info` (fsynced before it returns); with the defaults the "
        "embedding follows on the worker thread, and `embed_async=False` stores the vector and adds it to the "
        "graph before the call returns, as the peers' `add()` does.",
    ]
    for n in sizes:
        extras = kwtree_build.get(str(n), {}).get("build", {}).get("extras")
        if extras:
            out.append(f"kwtree's bulk insert at {n // 1000}k: the log {extras['log_s']:.1f} s (batches of "
                       f"{extras['batch']:,}, one fsynced operation each), embedding and vector appends "
                       f"{extras['embed_s']:.1f} s, the hnswlib graph {extras['graph_s']:.1f} s, the full-text index "
                       f"{extras['fulltext_s']:.1f} s.")
    if result.get("skipped_peers"):
        out += [f"Skipped peer {peer}: {why}." for peer, why in result["skipped_peers"].items()]
    if result.get("errors"):
        out += [f"Failed: {error}" for error in result["errors"]]
    return "\n".join(out)


def _early_lines(stores: list[str], summary_: dict, sizes: list[int]) -> list[str]:
    lines = []
    for n in sizes:
        for store in stores:
            for key, value in summary_.get(store, {}).get(str(n), {}).get("query", {}).items():
                every, later = value.get("summary_ms"), value.get("later_summary_ms")
                if every and later and every["p99"] > 2 * later["p99"]:
                    lines.append(f"- {LABELS[store]} at {n // 1000}k, {MODES.get(key, key)}: "
                                 f"p99 {every['p99']:.2f} ms (max {every['max']:.2f}) over all samples, "
                                 f"{later['p99']:.2f} ms (max {later['max']:.2f}) "
                                 f"without the first {EARLY_QUERIES}.")
    return lines


def _passes(count: int) -> str:
    return "1 pass" if count == 1 else f"{count} passes"


def _hnsw(config: dict) -> str:
    names = {"space": "space", "max_neighbors": "M", "ef_construction": "ef_construction", "ef_search": "ef_search"}
    return ", ".join(f"{names[key]}={config[key]}" for key in names if key in config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10k only, fewer queries, no strace")
    parser.add_argument("--work", type=Path, default=None, help="directory for the stores (default: the system's temp)")
    args = parser.parse_args(argv)
    print(markdown(run(args.quick, args.work)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
