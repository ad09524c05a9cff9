"""Changing the file mode of an existing tree: its own files and directories take the new
mode, and the manifest records it so every writer creates files with it from then on.

What is the tree's own: the manifest, the lock file, the log (``log/`` and compaction's
``log.*`` leftovers) and everything ``directory.KWTREE_ENTRIES`` names (caches, quarantine,
outbox), and the data directory itself (a group cannot read a shared tree it cannot enter).
Anything else in the directory (``.git``, notes) is the user's and keeps its mode.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

from kwtree.stores.directory import KWTREE_ENTRIES
from kwtree.stores.eventlog import LOG_DIR
from kwtree.stores.files import dir_mode
from kwtree.stores.lock import LOCK_NAME
from kwtree.stores.manifest import Manifest

__all__ = ["apply_file_mode"]


def _owned(name: str) -> bool:
    return name in KWTREE_ENTRIES or name in (LOCK_NAME, LOG_DIR) or name.startswith(f"{LOG_DIR}.")


def _chmod_tree(path: Path, file_mode: int) -> None:
    """Give ``path`` (not following links) and, for a directory, all below it the modes."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return
    if stat.S_ISDIR(info.st_mode):
        os.chmod(path, dir_mode(file_mode))
        for entry in os.scandir(path):
            _chmod_tree(Path(entry.path), file_mode)
    else:
        os.chmod(path, file_mode)


def apply_file_mode(directory: Path, manifest: Manifest, file_mode: int) -> Manifest:
    """Re-mode the tree's own entries in ``directory`` to ``file_mode`` (directories to its
    directory mode) and record it in the manifest; returns the new manifest. The caller holds
    the writer lock. The manifest is written last: a crash before it leaves the old mode
    recorded, and the next open with ``file_mode`` does it all again."""
    os.chmod(directory, dir_mode(file_mode))
    for name in sorted(os.listdir(directory)):
        if _owned(name):
            _chmod_tree(directory / name, file_mode)
    updated = replace(manifest, file_mode=file_mode)
    updated.save(directory)
    return updated
