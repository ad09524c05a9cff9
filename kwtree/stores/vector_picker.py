"""Turning rows ranked by similarity into a vector store's hits (``kwtree.stores.vectors``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["Accept", "Picker"]

#: The caller's filter of hits: (entity id, content hash) -> whether the row may be a hit.
Accept = Callable[[str, str], bool]


class Picker:
    """Turns rows ranked best first into at most k hits, one per entity, asking ``accept``
    about each row at most once across widening rounds, and never picking a blank row or
    one whose vector fails its check (``sound``).

    A hit's similarity is computed again for its row alone, in float64: the float32 scores
    that ranked it depend (in their last bits) on where the row sits in the matrix or the
    graph, so two equal texts could tie differently after a rebuild stored them in another
    order (DESIGN §4 invariant 4); recomputed, equal vectors score exactly alike."""

    def __init__(self, key: Callable[[int], tuple[str, str]], k: int, accept: Accept | None,
                 matrix: Callable[[], np.ndarray], sound: Callable[[int], bool], query: np.ndarray) -> None:
        self.key = key  # a row's (entity id, content hash)
        self.k = k
        self.accept = accept
        self.matrix = matrix
        self.sound = sound
        self.query = query.astype(np.float64)
        self.verdicts: dict[int, bool] = {}

    def _rows(self) -> np.ndarray:
        """The matrix as a plain array (a memory map's indexing costs a Python call per row)."""
        return self.matrix().view(np.ndarray)

    def pick(self, rows: np.ndarray, scores: np.ndarray) -> list[tuple[str, float]]:
        hits: list[tuple[str, float]] = []
        taken: set[str] = set()
        matrix: np.ndarray | None = None
        for row, score in zip(rows.tolist(), scores.tolist(), strict=True):
            entity_id, content_hash = self.key(row)
            if entity_id in taken:
                continue  # a better row of the same entity was already taken
            if not self.sound(row):
                continue  # its vector is not the one its key line names: never a hit
            if score == 0.0 and not (matrix := self._rows() if matrix is None else matrix)[row].any():
                continue  # a blank row scores exactly 0 (1 - 0 in hnswlib): skip it
            if self.accept is not None:
                ok = self.verdicts.get(row)
                if ok is None:
                    ok = self.verdicts[row] = bool(self.accept(entity_id, content_hash))
                if not ok:
                    continue
            taken.add(entity_id)
            matrix = self._rows() if matrix is None else matrix
            exact = float(np.dot(np.array(matrix[row], dtype=np.float64), self.query))
            hits.append((entity_id, min(1.0, max(-1.0, exact))))
            if len(hits) == self.k:
                break
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits

    def exact(self, query: np.ndarray, chosen: np.ndarray | None) -> list[tuple[str, float]]:
        """Every row (of ``chosen``, if given) scored against ``query`` (float32), picked best
        first, widening until k hits or the last row."""
        scores = (self.matrix() if chosen is None else self.matrix()[chosen]) @ query
        if (rows := len(scores)) == 0:
            return []
        fetch = min(rows, max(4 * self.k, 64))
        while True:
            if fetch < rows:
                top = np.argpartition(-scores, fetch - 1)[:fetch]
                top = top[np.argsort(-scores[top], kind="stable")]
            else:
                top = np.argsort(-scores, kind="stable")
            hits = self.pick(top if chosen is None else chosen[top], scores[top])
            if len(hits) == self.k or fetch == rows:
                return hits
            fetch = min(rows, fetch * 8)
