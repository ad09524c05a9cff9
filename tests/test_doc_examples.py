"""Every Python example of the README and of docs/ runs as a reader would run it: a page's
blocks in order, top to bottom, each as its own program in one fresh directory (holding a copy of
the shipped ``data/``), with the project's commands on PATH and no network. A block that cannot run
here says why in a comment right above it, ``<!-- not run: REASON -->`` (an API key, a server on
another host, a signature rather than a program); the test holds each such reason to be given.
The shell examples of ``kwtree --help`` and docs/cli.md run in tests/test_cli.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python\n(?P<code>.*?)^(?P=indent)```", re.S | re.M)
_NOT_RUN = re.compile(r"<!-- not run: (?P<why>[^>]*?) -->\s*$")


def blocks(page: Path) -> list[tuple[str, str | None]]:
    """The page's Python blocks, dedented, each with the reason it is not run (None: it runs)."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skipped = _NOT_RUN.search(before)
        found.append((textwrap.dedent(match.group("code")), skipped.group("why").strip() if skipped else None))
    return found


@pytest.mark.parametrize("page", [page for page in PAGES if blocks(page)], ids=lambda page: page.name)
def test_a_page_s_python_examples_run_top_to_bottom_in_a_fresh_directory(page: Path, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "data", tmp_path / "data")
    env = {**os.environ, "KWTREE_HOME": str(tmp_path / "home"), "PYTHONHASHSEED": "0",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for key in ("KWTREE_LLM", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "KWTREE_EMBEDDER"):
        env.pop(key, None)
    for number, (code, why) in enumerate(blocks(page), 1):
        if why is not None:
            assert why, f"{page.name} block {number}: say why it is not run"
            continue
        ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=300, check=False)
        assert ran.returncode == 0, f"{page.name} block {number} failed:\n{code}\n{ran.stderr[-2000:]}"
