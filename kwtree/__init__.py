"""kwtree: an embedded long-term memory for LLM agents.

A keyword tree (keywords with aliases, descriptions and typed relations) with text memories
("infos") linked to keywords, kept as an append-only JSONL event log in one directory.

``import kwtree`` loads nothing else: every name in ``__all__`` (the errors and the entities,
``KeywordTree`` itself, the mem0-shaped ``Memory``, the whole-directory operations, the embedders
and LLM clients) and the ``kwtree.git`` module are imported on first use (PEP 562), so the
``kwtree`` command asks a directory's server before it loads anything of the library, and a
script that never opens a tree does not pay for numpy, tantivy, hnswlib or the anthropic SDK.
``from kwtree import X`` works for every name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from kwtree import git as git  # a module, so not in __all__; "as git" exports it
    from kwtree.agent.anthropic_client import AnthropicLLMClient
    from kwtree.agent.clients import LLMClient, StubLLMClient
    from kwtree.agent.llm_env import llm_from_env
    from kwtree.agent.openai_client import OpenAILLMClient
    from kwtree.caches.embed import Embedder, HashEmbedder
    from kwtree.errors import (
        AgentError,
        ClosedError,
        CorruptLogError,
        CycleError,
        DamagedDirectoryError,
        DiskFullError,
        DuplicateKeywordError,
        FormatError,
        GitError,
        HasChildrenError,
        InvalidInputError,
        KwtreeError,
        LimitExceededError,
        LLMError,
        LLMResponseError,
        LLMTimeoutError,
        LLMUnavailableError,
        LockTimeoutError,
        MergeConflictError,
        NotFoundError,
        ReadOnlyError,
        StorageError,
        UndoConflictError,
        VersionConflictError,
    )
    from kwtree.facade.mem0 import Memory
    from kwtree.facade.tree import KeywordTree
    from kwtree.limits import Limits
    from kwtree.memory.abstracts import KeywordAbstract
    from kwtree.memory.candidates import Candidate, ExtractContext, Extractor, PassedOver
    from kwtree.memory.commit import CommitDecision, CommitFallback, CommitOptions, CommitResult
    from kwtree.memory.dedup import DedupThresholds
    from kwtree.memory.listing import ListedMemory, MemoryPage
    from kwtree.memory.policies import Policy
    from kwtree.models import (
        PROVENANCES,
        ROOT_ID,
        AgentOutcome,
        Change,
        Hit,
        Info,
        Keyword,
        Link,
        LinkedKeyword,
        Operation,
        Relation,
        RelationType,
        SearchResult,
        SearchStatus,
    )
    from kwtree.normalize import normalize_name
    from kwtree.ops.compaction import CompactionReport
    from kwtree.ops.erasure import ForgetReport, KeptInfo, UnreachableCopy
    from kwtree.ops.repair import repair_directory
    from kwtree.ops.restore import restore
    from kwtree.ops.verify import Finding, Report, verify_directory
    from kwtree.retrieval.recall import RecallWeights
    from kwtree.writes.outline import LoadedOutline

__version__ = "0.1.0"

#: Public names imported on first use: name -> the module that defines it.
_LAZY_NAMES = {
    "AgentError": "kwtree.errors",
    "ClosedError": "kwtree.errors",
    "CorruptLogError": "kwtree.errors",
    "CycleError": "kwtree.errors",
    "DamagedDirectoryError": "kwtree.errors",
    "DiskFullError": "kwtree.errors",
    "DuplicateKeywordError": "kwtree.errors",
    "FormatError": "kwtree.errors",
    "GitError": "kwtree.errors",
    "HasChildrenError": "kwtree.errors",
    "InvalidInputError": "kwtree.errors",
    "KwtreeError": "kwtree.errors",
    "LimitExceededError": "kwtree.errors",
    "LLMError": "kwtree.errors",
    "LLMResponseError": "kwtree.errors",
    "LLMTimeoutError": "kwtree.errors",
    "LLMUnavailableError": "kwtree.errors",
    "LockTimeoutError": "kwtree.errors",
    "MergeConflictError": "kwtree.errors",
    "NotFoundError": "kwtree.errors",
    "ReadOnlyError": "kwtree.errors",
    "StorageError": "kwtree.errors",
    "UndoConflictError": "kwtree.errors",
    "VersionConflictError": "kwtree.errors",
    "PROVENANCES": "kwtree.models",
    "ROOT_ID": "kwtree.models",
    "AgentOutcome": "kwtree.models",
    "Change": "kwtree.models",
    "Hit": "kwtree.models",
    "Info": "kwtree.models",
    "Keyword": "kwtree.models",
    "Link": "kwtree.models",
    "LinkedKeyword": "kwtree.models",
    "Operation": "kwtree.models",
    "Relation": "kwtree.models",
    "RelationType": "kwtree.models",
    "SearchResult": "kwtree.models",
    "SearchStatus": "kwtree.models",
    "normalize_name": "kwtree.normalize",
    "AnthropicLLMClient": "kwtree.agent.anthropic_client",
    "Candidate": "kwtree.memory.candidates",
    "PassedOver": "kwtree.memory.candidates",
    "CommitDecision": "kwtree.memory.commit",
    "CommitFallback": "kwtree.memory.commit",
    "CommitOptions": "kwtree.memory.commit",
    "CommitResult": "kwtree.memory.commit",
    "ListedMemory": "kwtree.memory.listing",
    "LoadedOutline": "kwtree.writes.outline",
    "MemoryPage": "kwtree.memory.listing",
    "CompactionReport": "kwtree.ops.compaction",
    "DedupThresholds": "kwtree.memory.dedup",
    "ExtractContext": "kwtree.memory.candidates",
    "Extractor": "kwtree.memory.candidates",
    "Embedder": "kwtree.caches.embed",
    "Finding": "kwtree.ops.verify",
    "ForgetReport": "kwtree.ops.erasure",
    "KeptInfo": "kwtree.ops.erasure",
    "UnreachableCopy": "kwtree.ops.erasure",
    "HashEmbedder": "kwtree.caches.embed",
    "KeywordAbstract": "kwtree.memory.abstracts",
    "KeywordTree": "kwtree.facade.tree",
    "LLMClient": "kwtree.agent.clients",
    "Limits": "kwtree.limits",
    "Memory": "kwtree.facade.mem0",
    "OpenAILLMClient": "kwtree.agent.openai_client",
    "Policy": "kwtree.memory.policies",
    "RecallWeights": "kwtree.retrieval.recall",
    "Report": "kwtree.ops.verify",
    "StubLLMClient": "kwtree.agent.clients",
    "llm_from_env": "kwtree.agent.llm_env",
    "repair_directory": "kwtree.ops.repair",
    "restore": "kwtree.ops.restore",
    "verify_directory": "kwtree.ops.verify",
}
#: Public modules imported on first use: ``kwtree.git.setup(dir)`` after ``import kwtree``.
_LAZY_MODULES = {"git": "kwtree.git"}

__all__ = [
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


def __getattr__(name: str) -> Any:
    """Import a lazy public name (or the ``git`` module) on first use and keep it here."""
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES[name]), name)
    elif name in _LAZY_MODULES:
        value = importlib.import_module(_LAZY_MODULES[name])
    else:
        raise AttributeError(f"module 'kwtree' has no attribute {name!r}")
    globals()[name] = value  # later lookups find it without calling this again
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_LAZY_MODULES))
