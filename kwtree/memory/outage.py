"""What a commit does when its LLM fails.

``commit_session`` asks the LLM up to three things, all while the commit is prepared and
before the write lock is taken (``kwtree/memory/session_commit.py``): the candidates (``extraction``,
``kwtree.memory.llm_extract``), where each new keyword goes (``placement``, the descend loop)
and whether a candidate repeats a memory already held (``dedup``). On a tree opened with
``on_agent_failure="fallback"`` (the default), a step the LLM could not do is done the way a
tree without an LLM does it, :data:`STEPS` says how, and the session is committed all the
same; each such step is a ``CommitFallback`` on the result and in the operation's audit, with
the LLM's error, so that the caller can extract again once the LLM is back. On a tree opened
with ``on_agent_failure="raise"``, the first failure is an AgentError and nothing is written.

:class:`CommitLLM` is the tree's client as one commit uses it: after the first call that got
no answer (the API refused, was unreachable, stayed overloaded through the client's retries,
or did not answer within its timeout) it asks no more, so an LLM that hangs costs a commit one
call's timeout, not one per step and keyword. A call whose answer was unusable
(LLMResponseError) does not stop the next ones: the API is up.
"""

from __future__ import annotations

from typing import Any

from kwtree.agent.clients import LLMClient
from kwtree.errors import LLMResponseError, LLMUnavailableError

__all__ = ["STEPS", "CommitLLM", "described"]

#: The steps of a commit the LLM may fail, and what does each one instead.
STEPS = {
    "extraction": "the offline rules found the candidates (kwtree.memory.extract.extract_offline)",
    "placement": "the offline navigator placed the new keywords",
    "dedup": "the term-overlap thresholds (CommitOptions.thresholds) judged the duplicates",
}
#: The longest error text a fallback keeps.
_ERROR_CHARS = 500


def described(exc: BaseException) -> str:
    """An error as a fallback names it: ``"<class>: <message>"``."""
    return f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]


class CommitLLM:
    """An LLMClient over ``client`` that stops asking after the first call that got no answer.

    ``down`` is that call's error (None while every call got an answer); later calls raise
    LLMUnavailableError at once, and ``not_asked`` is what a step that was not asked says."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.name = str(getattr(client, "name", type(client).__name__))  # the walks' audit names the model
        self.down: str | None = None

    @property
    def not_asked(self) -> str:
        """The error of a step skipped because the LLM failed earlier in this commit."""
        return f"not asked: the LLM failed earlier in this commit ({self.down})"

    def chat(self, messages: list[dict[str, Any]], json_schema: dict[str, Any]) -> dict[str, Any]:
        """The client's answer; raises what it raised, or LLMUnavailableError when an earlier
        call got no answer."""
        if self.down is not None:
            raise LLMUnavailableError(self.not_asked)
        try:
            return self.client.chat(messages, json_schema)
        except LLMResponseError:
            raise
        except Exception as exc:  # any other failure of the client: no answer came back
            self.down = described(exc)
            raise
