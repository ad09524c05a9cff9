"""docs/testing.md's example test file runs as it is: it is cut out of the page, written to a
new directory and run by a real ``pytest`` process (none of our conftest or profiles, only
shrinking turned off), once for the module; its report says which of its tests passed."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "testing.md"
HANG = 600  # seconds before a stuck run is reported as a failure (never reached normally)
#: The example's test of assert_caches_rebuildable on a tree with infos (see its xfail below).
CACHES_TEST = "test_remember_survives_losing_the_caches"
NO_SHRINKING = """
from hypothesis import Phase, settings
settings.register_profile("docs-example", phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile("docs-example")
"""


def example() -> str:
    """The one ```python block of docs/testing.md."""
    (block,) = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.MULTILINE | re.DOTALL)
    return block


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Run the example with pytest in a fresh directory; test name -> passed / failed (message)."""
    work = tmp_path_factory.mktemp("docs-example")
    (work / "test_my_memory.py").write_text(example())
    # The file as it is; only shrinking is off, so a failing example fails in seconds, not minutes.
    (work / "conftest.py").write_text(NO_SHRINKING)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(work),
         "--junitxml", str(work / "report.xml"), "test_my_memory.py"],
        cwd=work, capture_output=True, text=True, timeout=HANG, check=False,
    )
    assert (work / "report.xml").exists(), done.stdout + done.stderr
    found = {}
    for case in ET.parse(work / "report.xml").getroot().iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        found[case.get("name", "")] = "passed" if problem is None else f"failed: {problem.get('message')}"
    return found


def test_the_docs_example_is_one_test_file_of_four_tests(outcomes: dict[str, str]) -> None:
    assert sorted(outcomes) == sorted([
        "test_remember_survives_a_reopen", CACHES_TEST,
        "test_two_copies_of_one_memory_merge_to_one_state", "runTest",  # the state machine's TestCase
    ])


def test_the_docs_example_passes_its_reopen_merge_and_state_machine_tests(outcomes: dict[str, str]) -> None:
    assert {name: result for name, result in outcomes.items() if name != CACHES_TEST} == {
        name: "passed" for name in outcomes if name != CACHES_TEST}


def test_the_docs_example_passes_its_cache_rebuild_test(outcomes: dict[str, str]) -> None:
    assert outcomes[CACHES_TEST] == "passed"
