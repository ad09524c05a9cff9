"""The public surface: ``kwtree.__all__`` is pinned and sorted, every name in it resolves
(``import kwtree`` loads most of them on first use), ``kwtree.git`` resolves after a bare
``import kwtree``, and every kwtree type a public method of ``KeywordTree`` takes or returns
is importable from ``kwtree``."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import typing

import kwtree
from kwtree import KeywordTree

PUBLIC = [
    "PROVENANCES",
    "ROOT_ID",
    "AgentError",
    "AgentOutcome",
    "AnthropicLLMClient",
    "Candidate",
    "Change",
    "ClosedError",
    "CommitDecision",
    "CommitFallback",
    "CommitOptions",
    "CommitResult",
    "CompactionReport",
    "CorruptLogError",
    "CycleError",
    "DamagedDirectoryError",
    "DedupThresholds",
    "DiskFullError",
    "DuplicateKeywordError",
    "Embedder",
    "ExtractContext",
    "Extractor",
    "Finding",
    "ForgetReport",
    "FormatError",
    "GitError",
    "HasChildrenError",
    "HashEmbedder",
    "Hit",
    "Info",
    "InvalidInputError",
    "KeptInfo",
    "Keyword",
    "KeywordAbstract",
    "KeywordTree",
    "KwtreeError",
    "LLMClient",
    "LLMError",
    "LLMResponseError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "LimitExceededError",
    "Limits",
    "Link",
    "LinkedKeyword",
    "ListedMemory",
    "LoadedOutline",
    "LockTimeoutError",
    "Memory",
    "MemoryPage",
    "MergeConflictError",
    "NotFoundError",
    "OpenAILLMClient",
    "Operation",
    "PassedOver",
    "Policy",
    "ReadOnlyError",
    "RecallWeights",
    "Relation",
    "RelationType",
    "Report",
    "SearchResult",
    "SearchStatus",
    "StorageError",
    "StubLLMClient",
    "UndoConflictError",
    "UnreachableCopy",
    "VersionConflictError",
    "llm_from_env",
    "normalize_name",
    "repair_directory",
    "restore",
    "verify_directory",
]


def _isort_key(name: str) -> tuple[int, str]:
    """The order of ruff's RUF022 (isort style): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_the_public_names_are_pinned_and_sorted() -> None:
    assert kwtree.__all__ == PUBLIC  # a change to the public surface is made here, on purpose
    assert sorted(PUBLIC, key=_isort_key) == PUBLIC
    assert len(set(PUBLIC)) == len(PUBLIC)


def test_every_public_name_resolves_and_is_listed_by_dir() -> None:
    namespace: dict[str, object] = {}
    for name in PUBLIC:
        exec(f"from kwtree import {name}", namespace)  # the lazy ones too
        assert namespace[name] is getattr(kwtree, name)
    assert set(PUBLIC) | {"git", "__version__"} <= set(dir(kwtree))
    assert set(kwtree._LAZY_NAMES) <= set(PUBLIC)  # the lazy table holds public names only
    assert kwtree.KeywordTree.__module__ == "kwtree.facade.tree"
    try:
        kwtree.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("kwtree.no_such_name resolved")


def test_kwtree_git_resolves_after_a_bare_import() -> None:
    # The README's own call: import kwtree; kwtree.git.setup(dir). A fresh process, so that no
    # other test has imported the module already.
    code = "import kwtree; print(kwtree.git.setup.__module__, kwtree.git.merge_files.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["kwtree.ops.git", "merge_files"]


def _kwtree_types(annotation: object) -> set[type]:
    """The kwtree classes an annotation names, at any depth (``list[Hit]``, ``X | None``)."""
    found: set[type] = set()
    if isinstance(annotation, type) and annotation.__module__.startswith("kwtree"):
        found.add(annotation)
    for argument in typing.get_args(annotation):
        found |= _kwtree_types(argument)
    return found


def _public_methods() -> dict[str, typing.Callable[..., object]]:
    methods: dict[str, typing.Callable[..., object]] = {"__init__": KeywordTree.__init__}
    for name, member in inspect.getmembers(KeywordTree):
        if name.startswith("_"):
            continue
        target = member.fget if isinstance(member, property) else member
        if callable(target):
            methods[name] = target
    return methods


def test_every_type_the_public_methods_take_or_return_is_public() -> None:
    reached: dict[type, str] = {}
    # The facade names the optional parts' types (CompactionReport, Report) under TYPE_CHECKING
    # only, so that opening a tree does not load them: resolve its hints against the public names.
    public = {name: getattr(kwtree, name) for name in kwtree.__all__}
    for name, method in _public_methods().items():
        for parameter, annotation in typing.get_type_hints(method, localns=public).items():
            for kind in _kwtree_types(annotation):
                reached.setdefault(kind, f"KeywordTree.{name} ({parameter})")
    pending = list(reached)
    while pending:  # and the types of the fields of what they return (Hit.keywords, Report.findings)
        kind = pending.pop()
        if dataclasses.is_dataclass(kind):
            for field, annotation in typing.get_type_hints(kind).items():
                for inner in _kwtree_types(annotation) - set(reached):
                    reached[inner] = f"{kind.__name__}.{field}"
                    pending.append(inner)
    assert reached, "no kwtree type found: the walk is broken"
    hidden = {f"{kind.__module__}.{kind.__qualname__}": where for kind, where in reached.items()
              if getattr(kwtree, kind.__name__, None) is not kind}
    assert hidden == {}, "export these from kwtree (they are what the public methods take or return)"
    assert {kwtree.Hit, kwtree.LinkedKeyword, kwtree.RecallWeights, kwtree.Embedder, kwtree.LLMClient} <= set(reached)
