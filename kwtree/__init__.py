"""kwtree: an embedded long-term memory for LLM agents.

A keyword tree (keywords with aliases, descriptions and typed relations) with text memories
("infos") linked to keywords, kept as an append-only JSONL event log in one directory.
"""

from kwtree.errors import (
    ClosedError,
    CorruptLogError,
    CycleError,
    DuplicateKeywordError,
    FormatError,
    HasChildrenError,
    InvalidInputError,
    KwtreeError,
    LLMError,
    LLMResponseError,
    LLMTimeoutError,
    LLMUnavailableError,
    LockTimeoutError,
    NotFoundError,
    ReadOnlyError,
    StorageError,
    UndoConflictError,
    VersionConflictError,
)
from kwtree.models import (
    ROOT_ID,
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
from kwtree.tree import KeywordTree

__version__ = "0.1.0"

__all__ = [
    "ROOT_ID",
    "Change",
    "ClosedError",
    "CorruptLogError",
    "CycleError",
    "DuplicateKeywordError",
    "FormatError",
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
    "Link",
    "LockTimeoutError",
    "NotFoundError",
    "Operation",
    "ReadOnlyError",
    "Relation",
    "RelationType",
    "SearchResult",
    "SearchStatus",
    "StorageError",
    "UndoConflictError",
    "VersionConflictError",
    "normalize_name",
]
