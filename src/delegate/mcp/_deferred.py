"""Deferred tools: many tools (an MCP server's, typically) that an agent is told of by name only,
and whose schemas it loads with `tool_search` when it needs them.

The system prompt lists the deferred tools' names; their schemas stay out of every request (the
gate hides them) until a `tool_search` result loads them, or until routing promotes them at the
start: the `auto_promote` tools that best match the task's words are loaded from the first turn.
What is loaded is read back from the conversation (a `Loaded tools:` line that survives
compaction), so an agent's state is its messages and nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .._errors import ToolError
from .._messages import Message, TextPart, ToolResultPart
from ..tools import Tool, ToolContext, ToolReturn

TOOL_SEARCH = "tool_search"
LOADED = "Loaded tools:"
MAX_RESULTS = 5

_WORD = re.compile(r"[a-z0-9]{2,}")
_COMMON = frozenset({
    "the", "and", "for", "with", "from", "this", "that", "these", "those", "into", "onto", "then", "than",
    "are", "was", "were", "been", "have", "has", "had", "you", "your", "our", "its", "not", "but", "all",
    "any", "can", "will", "would", "should", "could", "please", "use", "using", "some", "what", "which",
})  # fmt: skip
"""Words too common to say which tool a task needs."""


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _COMMON


def deferred_index(names: Iterable[str]) -> str:
    """The system prompt's part: the deferred tools, by name only."""
    listed = ", ".join(sorted(names))
    return (
        f"Deferred tools (only their names are shown; call {TOOL_SEARCH} with words of what you need, or "
        f'"select:<name>,<name>", to load their schemas before calling them): {listed}'
    )


def rank(query: str, tools: Iterable[Tool]) -> list[Tool]:
    """The tools that share words with `query`, best first: a word of the name counts three times
    a word of the description. `select:a,b` picks tools by exact name instead."""
    candidates = list(tools)
    if query.startswith("select:"):
        wanted = [name.strip() for name in query[len("select:") :].split(",") if name.strip()]
        by_name = {t.name: t for t in candidates}
        return [by_name[name] for name in wanted if name in by_name]
    words = _words(query)
    scored: list[tuple[int, int, Tool]] = []
    for order, tool in enumerate(candidates):
        score = 3 * len(words & _words(tool.name)) + len(words & _words(tool.description))
        if score:
            scored.append((-score, order, tool))
    return [tool for _, _, tool in sorted(scored, key=lambda s: (s[0], s[1]))]


def search_tool(deferred: list[Tool]) -> Tool:
    """`tool_search` over `deferred`: answers with the full schemas of the best matches, and loads them."""

    def run(ctx: ToolContext, arguments: dict[str, Any]) -> ToolReturn:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query is required: words of what you need, or select:<name>,<name>")
        found = rank(query.strip(), deferred)[:MAX_RESULTS]
        if not found:
            raise ToolError(
                f"no deferred tool matches {query!r}; the deferred tools are: {', '.join(t.name for t in deferred)}"
            )
        loaded = f"{LOADED} {', '.join(t.name for t in found)}"
        schemas = "\n".join(f"- {t.name}: {t.description}\n  input schema: {t.parameters}" for t in found)
        return ToolReturn(content=f"{loaded}\nYou can call them now.\n{schemas}", keep=loaded)

    return Tool(
        name=TOOL_SEARCH,
        description=(
            "Load deferred tools by what they do (a few words) or by name (select:<name>,<name>): answers "
            "with their schemas, and they can be called from then on."
        ),
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Words of what you need, or select:<names>."}},
            "required": ["query"],
        },
        function=run,
    )


class DeferredGate:
    """Hides the deferred tools an agent has not loaded (see the module's docstring)."""

    def __init__(self, deferred: list[Tool], *, auto_promote: int = 0) -> None:
        self.deferred = {t.name: t for t in deferred}
        self.auto_promote = auto_promote
        self._routed: set[str] | None = None

    def visible(self, messages: list[Message], names: list[str]) -> list[str]:
        loaded = self.loaded(messages)
        return [name for name in names if name not in self.deferred or name in loaded]

    def why_hidden(self, name: str) -> str:
        return f"{name} is a deferred tool: load it first with {TOOL_SEARCH}(query='select:{name}')"

    def loaded(self, messages: list[Message]) -> set[str]:
        """Deferred tools loaded so far: routed from the task, and named by `tool_search` results."""
        if self._routed is None:
            task = next((m.text for m in messages if m.role == "user" and not m.hidden), "")
            best = rank(task, self.deferred.values())[: self.auto_promote]
            self._routed = {t.name for t in best}
        loaded = set(self._routed)
        for message in messages:
            for part in message.parts:
                text = part.content if isinstance(part, ToolResultPart) and part.name == TOOL_SEARCH else None
                if text is None and isinstance(part, TextPart) and message.role == "user":
                    text = part.text  # a compaction summary keeps the loaded line word for word
                for line in (text or "").splitlines():
                    if line.startswith(LOADED):
                        loaded.update(n.strip() for n in line[len(LOADED) :].split(",") if n.strip())
        return loaded
