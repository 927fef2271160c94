"""A completed subagent's conversation: what a follow-up (`task_message`) continues, kept in
memory while the run goes on and stored with its subagent's record for one after a resume."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from .._empty import empty_list
from .._messages import Message, messages_adapter
from ..agents import Subagent


@dataclass
class Conversation:
    """A completed subagent's conversation, what a follow-up continues: its definition, its
    system prompt, its messages, its key in the run, and the follow-ups (the lead's tool call
    ids) it took so far."""

    definition: Subagent
    system: str
    messages: list[Message]
    key: str | None
    follow_ups: list[str] = field(default_factory=empty_list)

    @classmethod
    def restore(cls, saved: Mapping[str, Any], definitions: Mapping[str, Subagent]) -> Conversation | None:
        """A conversation stored before the run was interrupted (`KeptConversation` as the store
        gives it back), validated; None when its type is not one this run has prepared."""
        definition = definitions.get(str(saved.get("type")))
        if definition is None:
            return None
        messages = messages_adapter().validate_python(saved.get("conversation", []))
        follow_ups = [str(c) for c in cast(list[Any], saved.get("follow_ups") or [])]
        key = saved.get("key")
        return cls(definition, str(saved.get("system", "")), messages, key and str(key), follow_ups)
