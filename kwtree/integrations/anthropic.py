"""Memory tools for an agent built on the ``anthropic`` SDK's Messages API, in-process.

::

    memory = memory_tools(tree, scope="user:alice")
    reply = memory.run(client, model="claude-sonnet-4-6", max_tokens=1024,
                       messages=[{"role": "user", "content": "What tea do I like?"}])

``run`` is the tool-use loop: it offers the tools, answers every ``tool_use`` block that names
one of them with a ``tool_result``, and asks again until the model stops asking. An agent that
keeps its own loop uses ``definitions`` (the ``tools=`` list) and ``results(response)`` (the
``tool_result`` blocks of the next user turn). The tools, their checks and their bounded
replies are the MCP server's (``kwtree.integrations.toolbox``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kwtree.errors import InvalidInputError
from kwtree.integrations.bounded import DEFAULT_MAX_CHARS
from kwtree.integrations.toolbox import ToolBox, ToolReply
from kwtree.validate import clean_int

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message

    from kwtree.facade.tree import KeywordTree

__all__ = ["MemoryTools", "memory_tools"]

#: ``run`` asks the model at most this many times by default.
MAX_ROUNDS = 8


def _field(block: Any, name: str) -> Any:
    """A content block's field, for the SDK's objects and for plain dicts alike."""
    return block.get(name) if isinstance(block, Mapping) else getattr(block, name, None)


class MemoryTools:
    """The memory tools of one toolbox in the Messages API's shapes."""

    def __init__(self, box: ToolBox) -> None:
        self.box = box
        #: The tools as the Messages API's ``tools=`` takes them.
        self.definitions: list[dict[str, Any]] = box.definitions()
        self._names = frozenset(definition["name"] for definition in self.definitions)

    def handles(self, name: str) -> bool:
        """Whether ``name`` is one of these tools (an agent may offer others besides)."""
        return name in self._names

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolReply:
        """Run one tool; a refusal comes back as an error reply, never as an exception."""
        return self.box.call(name, arguments)

    def results(self, response: Any) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks answering the ``tool_use`` blocks of ``response`` (a
        ``Message`` or its dict) that name these tools, in order; ``is_error`` marks a refusal."""
        found = []
        for block in _field(response, "content") or ():
            if _field(block, "type") != "tool_use" or not self.handles(_field(block, "name")):
                continue
            reply = self.call(_field(block, "name"), _field(block, "input"))
            found.append({"type": "tool_result", "tool_use_id": _field(block, "id"), "content": reply.text,
                          "is_error": reply.is_error})
        return found

    def run(self, client: anthropic.Anthropic, *, messages: Sequence[Mapping[str, Any]],
            max_rounds: int = MAX_ROUNDS, **create: Any) -> Message:
        """Ask ``client.messages.create(messages=..., tools=..., **create)`` and answer the model's
        uses of these tools, until it stops asking (at most ``max_rounds`` requests); returns its
        last message. ``messages`` is not changed; ``create["tools"]``, if given, are offered
        besides these. A message that also asks for one of the caller's tools, and the last
        round's message, come back with none of their tool uses run: the caller answers them
        (``results(response)`` runs the ones naming these tools), so nothing runs twice."""
        rounds = clean_int(max_rounds, "max_rounds", 1)
        conversation: list[Any] = list(messages)
        tools = [*(create.pop("tools", None) or ()), *self.definitions]
        for round in range(rounds):
            response: Message = client.messages.create(messages=conversation, tools=tools, **create)
            uses = [block for block in response.content if block.type == "tool_use"]
            if response.stop_reason != "tool_use" or not uses or round == rounds - 1 or not all(
                    self.handles(block.name) for block in uses):
                return response
            conversation += [{"role": "assistant", "content": response.content},
                             {"role": "user", "content": self.results(response)}]
        raise AssertionError("unreachable: the last round returns")  # pragma: no cover


def memory_tools(tree: KeywordTree, *, scope: str | None = None, read_only: bool = False,
                 max_result_chars: int = DEFAULT_MAX_CHARS) -> MemoryTools:
    """The memory tools over ``tree`` for the Messages API: ``scope`` pins every call to one
    scope (e.g. ``"user:alice"``), ``read_only`` offers only the reading tools, and each reply
    is at most ``max_result_chars`` characters. InvalidInputError for a bad argument."""
    if tree is None:
        raise InvalidInputError("tree must be an open KeywordTree")
    return MemoryTools(ToolBox(tree, scope=scope, read_only=read_only, max_result_chars=max_result_chars))
