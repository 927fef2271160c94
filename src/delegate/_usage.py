"""Token usage and its cost: counted per model call, summed per agent, rolled up to the parent."""

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
    how many requests they leave out.

    `cost_usd` is what the requests cost in US dollars, priced one by one from `genai-prices`'
    table (`delegate.models._prices`) as they are answered, cache tokens included: None when some request
    was made on a model without a price (never a guess), so a sum with an unknown part is unknown."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0
    requests_without_usage: int = 0
    cost_usd: float | None = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            requests=self.requests + other.requests,
            requests_without_usage=self.requests_without_usage + other.requests_without_usage,
            cost_usd=_plus(self.cost_usd, other.cost_usd),
        )

    def add(self, other: Usage) -> None:
        """Add `other` into this usage in place (the running total of a live agent)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.requests += other.requests
        self.requests_without_usage += other.requests_without_usage
        self.cost_usd = _plus(self.cost_usd, other.cost_usd)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, int | float | None]:
        # Spelled out: three events of every subagent carry one, and `fields()` costs 5 µs a call.
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "requests": self.requests,
            "requests_without_usage": self.requests_without_usage,
            "cost_usd": self.cost_usd,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        """A usage from its `to_dict`. One stored before costs were kept (no `cost_usd`) has an
        unknown cost when it made a request."""
        if not data:
            return cls()
        names = {f.name for f in fields(cls)} - {"cost_usd"}
        usage = cls(**{k: int(v) for k, v in data.items() if k in names})
        cost = data.get("cost_usd", None if usage.requests else 0.0)
        usage.cost_usd = None if cost is None else float(cost)
        return usage


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def cost_text(cost: float | None) -> str:
    """A cost as a person reads it: `$0.0123`, `$1.50`, or `cost unknown` (a model without a price)."""
    if cost is None:
        return "cost unknown"
    return f"${cost:,.2f}" if cost >= 1 else f"${cost:.4f}"


def usage_line(usage: Usage) -> str:
    """`1,234 input + 56 output tokens (300 cached) · $0.0012`: a usage on one line."""
    cached = f" ({usage.cache_read_tokens:,} cached)" if usage.cache_read_tokens else ""
    line = f"{usage.input_tokens:,} input + {usage.output_tokens:,} output tokens{cached}"
    return f"{line} · {cost_text(usage.cost_usd)}"
