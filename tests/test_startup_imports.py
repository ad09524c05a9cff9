"""What starting kwtree loads: ``import kwtree`` loads nothing else, the command's entry only
what it needs to reach a directory's server, ``--help`` and ``--version`` only the errors, the
entities, normalisation and the command table, and the optional parts (verify, repair,
compaction, export, upgrade, git, the anthropic SDK) wait for their first use. Each check runs
in a fresh process and reads its ``sys.modules``; how long start-up takes is measured in
bench/startup.py, never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import bench_module

#: Third-party packages that only some calls need.
HEAVY = ("numpy", "tantivy", "hnswlib", "anthropic", "snowballstemmer", "filelock", "rich")
#: kwtree's optional whole-directory operations.
OPTIONAL_OPS = ("compaction", "export", "git", "repair", "upgrade", "verify", "verify_fulltext", "verify_segments")


def _loaded_after(code: str) -> set[str]:
    """The modules loaded once ``code`` has run in a new Python process."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.__stderr__)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _top_level(modules: set[str]) -> set[str]:
    return {name.partition(".")[0] for name in modules}


def test_import_kwtree_loads_nothing_else() -> None:
    loaded = _loaded_after("import kwtree")
    assert {m for m in loaded if m.startswith("kwtree")} == {"kwtree"}
    assert _top_level(loaded).isdisjoint(HEAVY)


def test_the_command_s_entry_loads_nothing_of_the_library_before_it_chooses() -> None:
    """What a command a directory's server answers loads (kwtree.cli.entry): no third-party
    package and nothing of kwtree's but the entry and the rendezvous."""
    loaded = _loaded_after("import kwtree.cli.entry\nkwtree.cli.entry.rendezvous.endpoint('.')")
    assert {m for m in loaded if m.startswith("kwtree")} == {"kwtree", "kwtree.cli", "kwtree.cli.entry",
                                                             "kwtree.cli.rendezvous"}
    started = _loaded_after("pass")  # what the interpreter's start loads (site, an editable install's finder)
    assert {m.partition(".")[0] for m in loaded - started} <= set(sys.stdlib_module_names) | {"kwtree"}


@pytest.mark.parametrize("option", ["--help", "--version"])
def test_the_command_line_help_and_version_open_nothing(option: str) -> None:
    loaded = _loaded_after(
        f"from kwtree.cli.main import main\nimport contextlib, io\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main([{option!r}]) == 0")
    kwtree_modules = {m for m in loaded if m.startswith("kwtree")}
    assert kwtree_modules <= {"kwtree", "kwtree.errors", "kwtree.models", "kwtree.memory_schema", "kwtree.normalize",
                              "kwtree.cli",
                              "kwtree.cli.main", "kwtree.cli.output", "kwtree.cli.table",
                              "kwtree.cli.memory", "kwtree.cli.forget",  # the table's rows of the agent-memory commands
                              "kwtree.cli.abstracts",  # and of the keyword-abstracts command
                              "kwtree.cli.exchange",  # and of export, import, git and merge-driver
                              "kwtree.cli.maintenance",  # and of compact, reindex, snapshot, restore, verify, ...
                              "kwtree.cli.agents", "kwtree.cli.env",  # of mcp and hook, and the LLM they read
                              "kwtree.cli.rendezvous",  # of serve (the served commands, its default idle time)
                              "kwtree.integrations", "kwtree.integrations.bounded"}  # the result budget's default
    assert _top_level(loaded).isdisjoint(HEAVY)


def test_the_lazy_names_load_their_module_on_first_use() -> None:
    loaded = _loaded_after("import kwtree\nkwtree.verify_directory\nkwtree.git")
    assert {"kwtree.ops.verify", "kwtree.ops.git"} <= loaded
    assert "kwtree.facade.tree" not in loaded and "anthropic" not in _top_level(loaded)


def test_the_facade_loads_no_llm_sdk_and_no_stemmer_of_another_language() -> None:
    loaded = _loaded_after("from kwtree import KeywordTree")
    assert "anthropic" not in _top_level(loaded)
    assert "kwtree.agent.anthropic_client" not in loaded
    assert "snowballstemmer" not in _top_level(loaded)  # made at the first stem


def test_opening_a_tree_loads_no_optional_operation(tmp_path: Path) -> None:
    code = f"import kwtree\nwith kwtree.KeywordTree({str(tmp_path / 'tree')!r}, worker=False) as tree:\n    pass"
    loaded = _loaded_after(code)
    assert sorted(m for m in loaded if m.startswith("kwtree.ops.") and m.split(".")[2] in OPTIONAL_OPS) == []
    assert "anthropic" not in _top_level(loaded)


def test_the_startup_benchmark_runs(tmp_path: Path) -> None:
    startup = bench_module("startup")
    result = startup.run(runs=1, work=tmp_path)
    assert {key: len(samples) for key, samples in result["raw_ms"].items()} == {
        "bare": 1, "import": 1, "facade": 1, "help": 1, "version": 1, "open": 1}
    table = startup.markdown(result)
    assert "| kwtree --help |" in table and "x bare (min)" in table
    assert list(tmp_path.iterdir()) == []  # its scratch tree is removed


def test_the_choice_tables_are_defined_once_in_the_models() -> None:
    from kwtree import models
    from kwtree.facade import tree
    from kwtree.writes import keywords

    assert keywords.INFO_POLICIES is models.INFO_POLICIES
    assert tree.DURABILITY_MODES is models.DURABILITY_MODES
    assert tree.DIRECTIONS is models.DIRECTIONS


def test_the_cli_offers_the_choices_the_library_takes() -> None:
    from kwtree import models
    from kwtree.facade import agent_calls, tree
    from kwtree.writes import keywords

    assert (tree.DURABILITY_MODES, tree.DIRECTIONS) == (models.DURABILITY_MODES, models.DIRECTIONS)
    assert keywords.INFO_POLICIES is models.INFO_POLICIES
    assert agent_calls.ON_AGENT_FAILURE == ("fallback", "raise")  # the CLI reads it when a command runs
