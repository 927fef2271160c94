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
from collections.abc import Iterable, Sequence
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
    order = _ranked(query, [(t.name, t.description) for t in candidates])
    return [candidates[i] for i in order]


def _ranked(query: str, entries: list[tuple[str, str]]) -> list[int]:
    """Indexes of the `(name, description)` entries that share words with `query`, best first."""
    words = _words(query)
    scored: list[tuple[int, int]] = []
    for order, (name, description) in enumerate(entries):
        score = 3 * len(words & _words(name.replace("-", " ").replace("_", " "))) + len(words & _words(description))
        if score:
            scored.append((-score, order))
    return [order for _, order in sorted(scored)]


def _find_agents(query: str, agents: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Subagent types for `agent:<name>,<name>` (exact names) or for words of what they do."""
    if query.startswith("agent:"):
        wanted = [n.strip() for n in query[len("agent:") :].split(",") if n.strip()]
        by_name = dict(agents)
        return [(n, by_name[n]) for n in wanted if n in by_name]
    return [agents[i] for i in _ranked(query, agents)]


def search_tool(deferred: list[Tool], agents: Sequence[tuple[str, str]] = ()) -> Tool:
    """`tool_search` over `deferred`: answers with the full schemas of the best matches, and loads
    them. With `agents` (name, full description) it also finds subagent types for the `task` tool,
    by name (`agent:<name>`) or by words, with their full descriptions."""
    types = list(agents)

    def run(ctx: ToolContext, arguments: dict[str, Any]) -> ToolReturn:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query is required: words of what you need, or select:<name>,<name>")
        query = query.strip()
        found = [] if query.startswith("agent:") else rank(query, deferred)[:MAX_RESULTS]
        matches = [] if query.startswith("select:") else _find_agents(query, types)[:MAX_RESULTS]
        if not found and not matches:
            known = f"the deferred tools are: {', '.join(t.name for t in deferred)}" if deferred else ""
            kinds = "; ".join(p for p in (known, "subagent types are listed in the task tool" if types else "") if p)
            raise ToolError(f"nothing matches {query!r}; {kinds}")
        parts: list[str] = []
        if found:
            loaded = f"{LOADED} {', '.join(t.name for t in found)}"
            schemas = "\n".join(f"- {t.name}: {t.description}\n  input schema: {t.parameters}" for t in found)
            parts.append(f"{loaded}\nYou can call them now.\n{schemas}")
        if matches:
            listed = "\n".join(f"- {name}: {description}" for name, description in matches)
            parts.append(f"Subagent types (start one with task, subagent_type=<name>):\n{listed}")
        text = "\n\n".join(parts)
        return ToolReturn(content=text, keep=text.split("\n", 1)[0] if found else text[:2000])

    what = (
        "Load deferred tools by what they do (a few words) or by name (select:<name>,<name>): answers "
        "with their schemas, and they can be called from then on."
    )
    if types:
        what = (
            "Find subagent types for the task tool by what they do (a few words) or by name (agent:<name>), with "
            "their full descriptions"
            + (
                "; and load deferred tools the same way, or by name (select:<name>,<name>): answers with their "
                "schemas, and they can be called from then on."
                if deferred
                else "."
            )
        )
    return Tool(
        name=TOOL_SEARCH,
        description=what,
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
