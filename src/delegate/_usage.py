"""Token usage: counted per model call, summed per agent, rolled up to the parent."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(kw_only=True, slots=True)
class Usage:
    """Tokens and requests spent. Adding two usages sums every field.

    `requests_without_usage` counts the requests among `requests` whose tokens nobody knows: a
    request still in flight when its agent was cancelled or timed out. The provider may have
    billed it, but no answer came back to say what it used, so its tokens are in no token field
    (nothing is estimated): the token fields are exact for the other requests, and the count says
    how many requests they leave out."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0
    requests_without_usage: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            requests=self.requests + other.requests,
            requests_without_usage=self.requests_without_usage + other.requests_without_usage,
        )

    def add(self, other: Usage) -> None:
        """Add `other` into this usage in place (the running total of a live agent)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.requests += other.requests
        self.requests_without_usage += other.requests_without_usage

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int]:
        # Spelled out: three events of every subagent carry one, and `fields()` costs 5 µs a call.
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "requests": self.requests,
            "requests_without_usage": self.requests_without_usage,
        }

    def totals(self) -> dict[str, int]:
        """The `usage` of a run's JSON (`delegate run --json`, `GET /runs`): input and output tokens."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        if not data:
            return cls()
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in names})
