"""How many tokens a model can read at once (its context window), and how big a request is.

Every model knows its window: a model may declare it (`profile.context_window`: the local server reads
it from llama.cpp, `OpenAIModel(context_window=...)` and `AnthropicModel(context_window=...)` take
it), else the table below of known provider models gives it, else `DEFAULT_CONTEXT_WINDOW`. The
loop starts compacting from it and cuts a request down before sending when it would still not fit
(see `delegate/loop/_loop.py`), so no run dies of context overflow.

The table is conservative on purpose: where a family's models differ, or a larger window is a
beta, it gives the smaller figure. Cutting a little early costs a summary; overflowing costs the run.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Sequence
from typing import Any, cast

from .._messages import Message, Part
from ._base import Model, ModelRequest, ToolSpec

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "KNOWN_CONTEXT_WINDOWS",
    "MessageTally",
    "context_window",
    "estimate_tokens",
    "fixed_chars",
    "known_context_window",
    "overflow_limit",
    "part_chars",
    "tokens_of",
]

DEFAULT_CONTEXT_WINDOW = 32_768
"""The window of a model that neither says its own nor is in the table (a model behind vLLM or
Ollama, say). A server that refuses a request as too long tells its real window, and the loop
then holds to that."""

KNOWN_CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    # OpenAI (model names without the provider; the longest matching prefix wins)
    ("gpt-3.5-turbo", 16_385),
    ("gpt-4", 8_192),
    ("gpt-4-32k", 32_768),
    ("gpt-4-turbo", 128_000),
    ("gpt-4o", 128_000),
    ("chatgpt-4o", 128_000),
    ("gpt-4.1", 1_000_000),
    ("gpt-4.5", 128_000),
    ("gpt-5", 272_000),  # 400k in all, of which at most 128k are the reply: 272k of input
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o3", 200_000),
    ("o3-mini", 200_000),
    ("o4-mini", 200_000),
    # Anthropic: every Claude 3, 3.5, 3.7, 4 and 4.5 model reads 200k (1M is a beta of some)
    ("claude-", 200_000),
    ("claude-2", 100_000),
    ("claude-instant", 100_000),
)
"""Known models' windows by name prefix: the longest prefix that a name starts with wins
(`gpt-4o-mini` takes `gpt-4o`, `gpt-4` alone takes 8,192)."""


@functools.lru_cache(maxsize=1024)
def known_context_window(name: str) -> int | None:
    """The window of model `name` (`gpt-4o`, `openai:gpt-4o`, `anthropic:claude-sonnet-4-5`) from
    the table, or None when it is not there."""
    bare = name.split(":", 1)[1] if ":" in name else name
    bare = bare.rsplit("/", 1)[-1].lower()  # `openai/gpt-4o` as routers name it
    best: tuple[int, int] | None = None
    for prefix, window in KNOWN_CONTEXT_WINDOWS:
        if bare.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), window)
    return best[1] if best else None


def context_window(model: Model, override: int | None = None) -> int:
    """The tokens `model` can read at once: `override` (the runtime's setting), else what the
    model says (`profile.context_window`), else the table, else `DEFAULT_CONTEXT_WINDOW`."""
    if override:
        return override
    return model.profile.context_window or known_context_window(model.name) or DEFAULT_CONTEXT_WINDOW


CHARS_PER_TOKEN = 3.0
"""A conservative guess: English prose runs about 4 characters a token with the tokenizers of
today's models, JSON and paths nearer 3. Guessing low cuts a little early, never too late."""


def estimate_tokens(request: ModelRequest, tally: MessageTally | None = None) -> int:
    """About how many tokens `request` takes to read: its system prompt, messages and tool schemas.
    With a `tally`, messages it has counted before are not counted again."""
    counted = tally.chars(request.messages) if tally is not None else sum(message_chars(m) for m in request.messages)
    return tokens_of(fixed_chars(request) + counted, len(request.messages))


def fixed_chars(request: ModelRequest) -> int:
    """The characters of `request` that are not its messages: its system prompt and tool schemas."""
    return len(request.system) + _tools_chars(request.tools)


_TOOLS_CHARS: dict[int, tuple[Sequence[ToolSpec], int]] = {}
"""Characters of each list of tool specs seen, by identity (held, like `_TOOL_CHARS`): an agent
offers the same list turn after turn, and the subagents of one type share theirs."""


def _tools_chars(specs: Sequence[ToolSpec]) -> int:
    held = _TOOLS_CHARS.get(id(specs))
    if held is not None and held[0] is specs:
        return held[1]
    if len(_TOOLS_CHARS) > 1024:  # lists made per turn (gated) come and go
        _TOOLS_CHARS.clear()
    size = sum(_tool_chars(t) for t in specs)
    _TOOLS_CHARS[id(specs)] = (specs, size)
    return size


def tokens_of(chars: int, messages: int) -> int:
    """`estimate_tokens` of a request of `chars` characters in all and `messages` messages."""
    return int(chars / CHARS_PER_TOKEN) + 8 * messages + 16


_TOOL_CHARS: dict[int, tuple[ToolSpec, int]] = {}
"""Characters of each tool spec seen, by identity (the spec is held, so its id is not reused):
the loop estimates every request, and a schema's JSON costs more to make than the turn's text."""


def _tool_chars(spec: ToolSpec) -> int:
    held = _TOOL_CHARS.get(id(spec))
    if held is not None and held[0] is spec:
        return held[1]
    if len(_TOOL_CHARS) > 4096:  # specs made per turn (gated, lean) come and go
        _TOOL_CHARS.clear()
    size = len(spec.description) + len(json.dumps(spec.parameters))
    _TOOL_CHARS[id(spec)] = (spec, size)
    return size


class MessageTally:
    """The characters of an agent's conversation, each message counted once: the loop estimates
    every request, and a conversation grows by new messages (compaction makes a new list, whose
    messages are counted afresh)."""

    __slots__ = ("_counted", "_total")

    def __init__(self) -> None:
        self._counted: list[Message] = []
        self._total = 0

    def chars(self, messages: list[Message]) -> int:
        counted = self._counted
        n = len(counted)
        if n > len(messages) or not all(map(operator.is_, messages[:n], counted)):
            counted.clear()  # not the conversation counted so far: count it afresh
            self._total, n = 0, 0
        for message in messages[n:]:
            counted.append(message)
            self._total += message_chars(message)
        return self._total


def message_chars(message: Message) -> int:
    """The characters of one message a model reads (media counted as a fixed 1,000 tokens)."""
    return sum(part_chars(part) for part in message.parts)


def part_chars(part: Part) -> int:
    """The characters of one part of a message (see `message_chars`)."""
    match part.kind:
        case "text" | "reasoning":
            return len(part.text)
        case "tool_call":
            return len(part.name) + len(part.raw_arguments or json.dumps(part.arguments, ensure_ascii=False))
        case "tool_result":
            return len(part.name) + len(part.content) + 16
        case "media":
            return int(1000 * CHARS_PER_TOKEN)
    return 0


_LIMIT = re.compile(
    r"(?:context (?:size|length|window)[^0-9]{0,24}?|>\s*)(\d[\d,]*)\s*(?:tokens|maximum)", re.IGNORECASE
)
_OVERFLOW = re.compile(
    r"context (?:size|length|window)|prompt is too long|too many tokens|context_length_exceeded|"
    r"exceed_context_size|maximum context",
    re.IGNORECASE,
)


def overflow_limit(status: int, detail: str, body: Any = None) -> tuple[bool, int | None]:
    """Whether an error answer says the request was longer than the model's window, and that
    window when it says it. Recognises llama.cpp (`exceeds the available context size (8192
    tokens)`, with `n_ctx`), vLLM and OpenAI (`maximum context length is 4096 tokens`), and
    Anthropic (`prompt is too long: 210000 tokens > 200000 maximum`)."""
    if status not in (400, 413, 422) or not _OVERFLOW.search(detail):
        return False, None
    if isinstance(body, dict):
        n_ctx = cast(dict[str, Any], body).get("n_ctx")
        if isinstance(n_ctx, int) and n_ctx > 0:
            return True, n_ctx
    found = _LIMIT.findall(detail)
    return True, (int(found[0].replace(",", "")) if found else None)
