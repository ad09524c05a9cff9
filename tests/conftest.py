"""Shared fixtures and hypothesis profiles.

Profiles: ``default`` keeps the whole suite within a few minutes on 2 cores;
``thorough`` (KWTREE_HYPOTHESIS_PROFILE=thorough) runs many more examples.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Child, tmpfs
from hypothesis import HealthCheck, settings
from messages_api import SHELL_SETTINGS, FakeMessagesAPI

#: The size of the ``disk`` fixture's file system: room for a small tree and its caches.
DISK_BYTES = 8 << 20

#: Trees the tests make use the hash embedder, in this process and in the ones it starts (the
#: CLI, crash children): fast and deterministic. Tests of the default embedder unset it.
os.environ["KWTREE_EMBEDDER"] = "hash"
#: No command a test runs asks a directory's server or starts one (the CLI would start one per
#: tree, each holding it for minutes); tests/test_serve.py turns it on where it is the subject.
os.environ["KWTREE_SERVE"] = "off"
#: No test reaches a model the developer's shell names (``Memory`` and the CLI read KWTREE_LLM).
os.environ.pop("KWTREE_LLM", None)

settings.register_profile(
    "default",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("KWTREE_HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def tree_dir(tmp_path: Path) -> Path:
    """A path for a new data directory (not yet created)."""
    return tmp_path / "tree"


@pytest.fixture
def tree(tree_dir: Path):
    """A fresh writable tree without fsync (tests about durability open their own)."""
    from kwtree import KeywordTree

    t = KeywordTree(tree_dir, durability="none")
    yield t
    t.close()


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A directory on its own small real file system (a tmpfs of ``DISK_BYTES``), for full-disk
    tests (helpers.fill_disk fills it); unmounted afterwards, skipped where mounting is not
    permitted."""
    with tmpfs(tmp_path / "disk", f"size={DISK_BYTES}") as mount_point:
        yield mount_point


@pytest.fixture
def children():
    """Start child processes (helpers.Child); any still running at the end is killed."""
    started: list[Child] = []

    def start(code: str, *args: object) -> Child:
        child = Child(code, *args)
        started.append(child)
        return child

    yield start
    for child in started:
        child.cleanup()


@pytest.fixture
def api() -> Iterator[FakeMessagesAPI]:
    """A fake Anthropic Messages API on 127.0.0.1 (tests/messages_api.py), shut down after the test."""
    fake = FakeMessagesAPI()
    fake.thread.start()
    yield fake
    fake.released.set()
    fake.server.shutdown()
    fake.server.server_close()
    fake.thread.join()


@pytest.fixture
def clean_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key, endpoint, LLM setting or proxy of the developer's shell leaks into a test."""
    for name in SHELL_SETTINGS:
        monkeypatch.delenv(name, raising=False)
