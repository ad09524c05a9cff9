"""kwtree: an embedded long-term memory for LLM agents.

A keyword tree (keywords with aliases, descriptions and typed relations) with text memories
("infos") linked to keywords, kept as an append-only JSONL event log in one directory.
"""

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
from kwtree.facade.tree import KeywordTree
from kwtree.limits import Limits
from kwtree.models import (
    ROOT_ID,
    AgentOutcome,
    Change,
    Info,
    Keyword,
    Link,
    Operation,
    Relation,
    RelationType,
    SearchResult,
    SearchStatus,
)
from kwtree.normalize import normalize_name
from kwtree.ops.compaction import CompactionReport
from kwtree.ops.repair import repair_directory
from kwtree.ops.verify import Finding, Report, verify_directory
from kwtree.ops.restore import restore

__version__ = "0.1.0"

__all__ = [
    "ROOT_ID",
    "AgentError",
    "AgentOutcome",
    "Change",
    "ClosedError",
    "CorruptLogError",
    "CompactionReport",
    "CycleError",
    "DamagedDirectoryError",
    "DiskFullError",
    "DuplicateKeywordError",
    "Finding",
    "FormatError",
    "GitError",
    "HasChildrenError",
    "Info",
    "InvalidInputError",
    "Keyword",
    "KeywordTree",
    "KwtreeError",
    "LLMError",
    "LLMResponseError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "LimitExceededError",
    "Limits",
    "Link",
    "MergeConflictError",
    "LockTimeoutError",
    "NotFoundError",
    "Operation",
    "ReadOnlyError",
    "Relation",
    "RelationType",
    "Report",
    "SearchResult",
    "SearchStatus",
    "StorageError",
    "UndoConflictError",
    "VersionConflictError",
    "normalize_name",
    "repair_directory",
    "restore",
    "verify_directory",
]
