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

from .._messages import Message, Part, TextPart, ToolCallPart, ToolResultPart
from ..models import ModelRequest, estimate_tokens, fixed_chars, message_chars, part_chars, tokens_of

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
    when the caller knows it.

    The size is kept as each cut is made, by the characters of what changed, never counted
    afresh: a lead that fanned out to 10,000 subagents has a few messages of megabytes, and its
    request is cut many times before it fits."""
    if (estimate if estimate is not None else estimate_tokens(request)) <= limit:
        return request
    messages = list(request.messages)
    recent = max(1, len(messages) - 2)  # the latest call and its result stay whole in step 1
    messages = [m if i == 0 or i >= recent else _shorten(m, OLD_PART_CHARS) for i, m in enumerate(messages)]
    chars = fixed_chars(request) + sum(message_chars(m) for m in messages)

    def fits(dropped: int) -> bool:
        return tokens_of(chars + len(_note(dropped)), len(messages)) <= limit

    dropped = 0
    while not fits(dropped) and len(messages) > 3:
        gone = 1
        while len(messages) - gone > 3 and messages[1 + gone].role != "assistant":  # no result without its call
            gone += 1
        chars -= sum(message_chars(m) for m in messages[1 : 1 + gone])
        del messages[1 : 1 + gone]
        dropped += gone
    while not fits(dropped) and (change := _halve_longest(messages)):
        chars += change
    return replace(request, messages=[_noted(messages[0], dropped), *messages[1:]])


def _note(dropped: int) -> str:
    return f"\n({dropped} earlier messages were left out to fit the model's context window.)" if dropped else ""


def _noted(first: Message, dropped: int) -> Message:
    if not dropped:
        return first
    return replace(first, parts=[*first.parts, TextPart(text=_note(dropped))])


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


def _halve_longest(messages: list[Message]) -> int:
    """Halve the longest text of `messages` in place and return how many characters that changed
    the request by (negative); 0 when none is left to halve."""
    sizes = [(_size(part), i, j) for i, m in enumerate(messages) for j, part in enumerate(m.parts)]
    if not sizes:
        return 0
    size, i, j = max(sizes)
    if size <= MIN_PART_CHARS:
        return 0
    parts = list(messages[i].parts)
    cut = _cut_part(parts[j], max(MIN_PART_CHARS, size // 2))
    change = part_chars(cut) - part_chars(parts[j])
    if change >= 0:  # its note would make it no shorter: nothing is left to halve
        return 0
    parts[j] = cut
    messages[i] = replace(messages[i], parts=parts)
    return change
