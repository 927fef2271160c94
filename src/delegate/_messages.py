"""Messages and their parts: plain tagged dataclasses, turned into JSON through one adapter.

A conversation is a list of `Message`s. The system prompt is not a message: it travels in
`ModelRequest.system`. Tool results of one turn travel together in one `role="tool"` message,
in the order of the calls.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, TypeAdapter

from ._empty import empty_dict
from ._text import safe_json


@dataclass(kw_only=True, slots=True)
class TextPart:
    text: str
    kind: Literal["text"] = "text"


@dataclass(kw_only=True, slots=True)
class MediaPart:
    """An image, audio, video or file block: inline base64 `data` or a `url`."""

    media_type: str
    data: str | None = None
    url: str | None = None
    name: str | None = None
    kind: Literal["media"] = "media"


@dataclass(kw_only=True, slots=True)
class ReasoningPart:
    """Provider reasoning ("thinking"). Sent back to the same provider, never shown elsewhere."""

    text: str
    signature: str | None = None
    kind: Literal["reasoning"] = "reasoning"


@dataclass(kw_only=True, slots=True)
class ToolCallPart:
    """A tool call asked for by the model.

    `arguments` is the parsed JSON object; when the model's JSON could not be parsed, `arguments`
    is empty and `raw_arguments` keeps the text, and the loop answers with an error result.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=empty_dict)
    raw_arguments: str | None = None
    kind: Literal["tool_call"] = "tool_call"


@dataclass(kw_only=True, slots=True)
class ToolResultPart:
    """What a tool gave back. `keep` is the text that must survive compaction, if any."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    keep: str | None = None
    kind: Literal["tool_result"] = "tool_result"


Part = Annotated[TextPart | MediaPart | ReasoningPart | ToolCallPart | ToolResultPart, Field(discriminator="kind")]

Role = Literal["user", "assistant", "tool"]


class HasParts:
    """What reads a message's or a model answer's `parts`: its text and its tool calls."""

    __slots__ = ()
    parts: list[Part]

    @property
    def text(self) -> str:
        """The text parts joined, for display and for answers."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]


@dataclass(kw_only=True, slots=True)
class Message(HasParts):
    """One message. `hidden` messages are framework notes the user never wrote; `name` tags them."""

    role: Role
    parts: list[Part]
    name: str | None = None
    hidden: bool = False
    metadata: dict[str, Any] = field(default_factory=empty_dict)

    @classmethod
    def user(cls, text: str, *, name: str | None = None, hidden: bool = False) -> Message:
        return cls(role="user", parts=[TextPart(text=text)], name=name, hidden=hidden)

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.parts if isinstance(p, ToolResultPart)]


_TEXTS: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "media": ("media_type", "data", "url", "name"),
    "reasoning": ("text", "signature"),
    "tool_call": ("id", "name", "arguments", "raw_arguments"),
    "tool_result": ("tool_call_id", "name", "content", "keep"),
}
"""The fields of each kind of part that hold text (or, `arguments`, JSON)."""


_P = TypeVar("_P", bound=TextPart | MediaPart | ReasoningPart | ToolCallPart | ToolResultPart)


def safe_part(part: _P) -> _P:
    """`part` itself when its text is valid UTF-8 (see `_text.py`), else a copy with each lone
    surrogate escaped: what a tool returned, or a model answered, before it joins a conversation
    (a provider's SDK cannot send a lone surrogate, nor can the store, a stream or a terminal)."""
    names = _TEXTS[part.kind]
    for name in names:
        value = getattr(part, name)
        if not (value is None or (type(value) is str and value.isascii()) or safe_json(value) is value):
            return replace(part, **{n: safe_json(getattr(part, n)) for n in names})
    return part


def safe_parts(parts: list[Part]) -> list[Part]:
    """`parts` itself when every one is valid UTF-8, else a list of `safe_part`s."""
    for part in parts:
        if safe_part(part) is not part:
            return [safe_part(p) for p in parts]
    return parts


@functools.cache
def messages_adapter() -> TypeAdapter[list[Message]]:
    """Dumps and validates conversations, for the store and the HTTP API (made on first use: its
    schema costs a process that never reads a conversation back about 1 MB)."""
    return TypeAdapter(list[Message])
