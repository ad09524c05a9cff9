"""The type checker and the linter stay part of CI, pinned, and the type checking stays strict.

CI (``.ci/run``) runs mypy and ruff after the tests; these checks keep the settings that make
those runs mean something from being loosened by accident.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_checkers_are_pinned_exactly_in_the_dev_extra():
    dev = PYPROJECT["project"]["optional-dependencies"]["dev"]
    for tool in ("mypy", "ruff"):
        pins = [spec for spec in dev if re.match(rf"{tool}\b", spec)]
        assert len(pins) == 1 and re.fullmatch(rf"{tool}==\d+(\.\d+)+", pins[0]), pins


def test_ci_runs_the_type_checker_and_the_linter_after_the_tests():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "set -euo pipefail" in script
    steps = [line for line in script.splitlines() if line.startswith((".venv/", "python3 "))]
    tests = next(i for i, line in enumerate(steps) if "-m pytest" in line)
    mypy = next(i for i, line in enumerate(steps) if "-m mypy" in line)
    ruff = next(i for i, line in enumerate(steps) if "-m ruff check" in line)
    assert tests < mypy and tests < ruff


def test_mypy_is_strict_with_no_blanket_escapes():
    mypy = PYPROJECT["tool"]["mypy"]
    assert mypy["strict"] is True
    assert mypy["files"] == ["kwtree"]
    assert "ignore-without-code" in mypy["enable_error_code"]
    for override in mypy.get("overrides", []):
        # Only third-party modules without types may be let off, and only their missing stubs.
        assert set(override) == {"module", "ignore_missing_imports"}, override
        assert not any(name.startswith("kwtree") for name in override["module"]), override


def test_every_ruff_exception_is_for_a_named_rule():
    lint = PYPROJECT["tool"]["ruff"]["lint"]
    ignored = [*lint.get("ignore", []), *(c for codes in lint.get("per-file-ignores", {}).values() for c in codes)]
    assert all(re.fullmatch(r"[A-Z]+[0-9]+", code) for code in ignored), ignored
