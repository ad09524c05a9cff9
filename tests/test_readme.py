"""The README's Python examples run as written, in a fresh directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("index", range(len(re.findall(r"```python\n", README.read_text()))))
def test_each_python_example_of_the_readme_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    block = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[index]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, f"README.md block {index + 1}", "exec"), {})
    printed = capsys.readouterr().out
    if "Memory(" in block:  # the agent-memory example prints what it recalls
        assert "## Profile" in printed and printed.splitlines()[-1] == "I love green tea."
        assert list(tmp_path.glob("memory/log/*.jsonl")) and b"Leeds" not in b"".join(
            path.read_bytes() for path in (tmp_path / "memory").rglob("*") if path.is_file())
