"""Cutting a request down to the model's context window, when compaction was not enough.

The loop compacts the conversation when it grows past most of the window (see `compact` in
`_loop.py`). A request can still be too long: one tool result bigger than the window, a
conversation too short to compact, a summary that came out long, a server whose window is smaller
than we thought. `fit_request` then cuts what is sent (never the agent's own record of its turns),
in this order, until the estimate fits:

1. the long texts of older turns (tool results, text, call arguments) are cut to their start and
   end, with a note of how much was left out;
2. the oldest turns after the task are left out, each call with its result, with a note saying so
   in the task message;
3. the longest text left anywhere (the latest tool result, the task itself) is halved, again and
   again, down to a few hundred characters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ._messages import Message, Part, TextPart, ToolCallPart, ToolResultPart
from .models import ModelRequest, estimate_tokens

__all__ = ["CUT_NOTE", "cut_text", "fit_request"]

OLD_PART_CHARS = 1_500
"""What step 1 leaves of a long text of an older turn."""
MIN_PART_CHARS = 400
"""Step 3 halves no text below this."""
CUT_NOTE = "characters cut to fit the model's context window"


def cut_text(text: str, keep: int) -> str:
    """`text` cut to about `keep` characters: its start and its end, with a note of what went."""
    if len(text) <= keep:
        return text
    head = keep * 2 // 3
    tail = keep - head
    return f"{text[:head]}\n[... {len(text) - head - tail:,} {CUT_NOTE} ...]\n{text[len(text) - tail :]}"


def fit_request(request: ModelRequest, limit: int, estimate: int | None = None) -> ModelRequest:
    """`request` with its messages cut until its estimated size is at most `limit` tokens (or as
    far as cutting goes: the system prompt and the tools are never cut). `estimate` is its size,
    when the caller knows it."""
    if (estimate if estimate is not None else estimate_tokens(request)) <= limit:
        return request
    messages = list(request.messages)
    recent = max(1, len(messages) - 2)  # the latest call and its result stay whole in step 1
    messages = [m if i == 0 or i >= recent else _shorten(m, OLD_PART_CHARS) for i, m in enumerate(messages)]
    fitted = replace(request, messages=messages)
    dropped = 0
    while estimate_tokens(fitted) > limit and len(messages) > 3:
        del messages[1]
        dropped += 1
        while len(messages) > 3 and messages[1].role != "assistant":  # no result without its call
            del messages[1]
            dropped += 1
        fitted = replace(request, messages=[_noted(messages[0], dropped), *messages[1:]])
    while estimate_tokens(fitted) > limit and _halve_longest(messages):
        fitted = replace(request, messages=[_noted(messages[0], dropped), *messages[1:]])
    return fitted


def _noted(first: Message, dropped: int) -> Message:
    if not dropped:
        return first
    note = TextPart(text=f"\n({dropped} earlier messages were left out to fit the model's context window.)")
    return replace(first, parts=[*first.parts, note])


def _shorten(message: Message, keep: int) -> Message:
    parts = [_cut_part(part, keep) for part in message.parts]
    return message if all(a is b for a, b in zip(parts, message.parts, strict=True)) else replace(message, parts=parts)


def _cut_part(part: Part, keep: int) -> Part:
    if isinstance(part, ToolResultPart) and len(part.content) > keep:
        return replace(part, content=cut_text(part.content, keep))
    if isinstance(part, TextPart) and len(part.text) > keep:
        return replace(part, text=cut_text(part.text, keep))
    if isinstance(part, ToolCallPart):
        arguments: dict[str, Any] = {
            k: cut_text(v, keep) if isinstance(v, str) else v for k, v in part.arguments.items()
        }
        if arguments != part.arguments:
            return replace(part, arguments=arguments)
    return part


def _size(part: Part) -> int:
    if isinstance(part, ToolResultPart):
        return len(part.content)
    if isinstance(part, TextPart):
        return len(part.text)
    if isinstance(part, ToolCallPart):
        return max((len(v) for v in part.arguments.values() if isinstance(v, str)), default=0)
    return 0


def _halve_longest(messages: list[Message]) -> bool:
    """Halve the longest text of `messages` in place; False when none is left to halve."""
    sizes = [(_size(part), i, j) for i, m in enumerate(messages) for j, part in enumerate(m.parts)]
    if not sizes:
        return False
    size, i, j = max(sizes)
    if size <= MIN_PART_CHARS:
        return False
    parts = list(messages[i].parts)
    parts[j] = _cut_part(parts[j], max(MIN_PART_CHARS, size // 2))
    messages[i] = replace(messages[i], parts=parts)
    return True
