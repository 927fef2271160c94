"""What a model request costs, in US dollars: from `genai-prices`' table (pydantic's maintained
price list, bundled with the package: it is never fetched at run time, so a price is the one of the
installed version; upgrade the package for newer prices), or from a price per million tokens the
operator gives.

A model declares how it is priced (`ModelProfile.pricing`): `openai:` and `anthropic:` models by
their provider's table (behind any base URL: a gateway, a proxy, vLLM serving a model of the same
name), the embedded `local` model at 0. The operator can say otherwise for any model (`--price`,
`DELEGATE_PRICES`, `Extensions.model_prices`: see `parse_price`). A model without a price (the test
fakes, a name the table does not know, `--price M=none`) costs `None`: never a guess.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from .._errors import UserError

if TYPE_CHECKING:
    from .._usage import Usage

PRICES_ENV = "DELEGATE_PRICES"
"""`[MODEL=]PRICE` entries, comma-separated, as `--price` takes them (see `parse_price`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Pricing:
    """Whose prices a model's requests are charged at.

    `provider`: a provider id of `genai-prices` (`openai`, `anthropic`, `groq`, ...) or the URL of
    the API the model is reached at (the table knows which provider answers there; a URL it does
    not know, such as a server on this machine, gives no price). `cache_apart`: the provider's
    `input_tokens` leave out the cached part of the prompt (Anthropic's do; OpenAI's include it, as
    the table counts them)."""

    provider: str = ""
    cache_apart: bool = False
    per_million: tuple[float, float, float] | None = None
    """US dollars per million input, output and cached (read from cache) input tokens, instead of
    a table: what a gateway charges, a model the table does not know, 0 for a model of one's own."""

    @classmethod
    def usd_per_million(cls, input: float, output: float, cached: float | None = None) -> Pricing:
        """A price of one's own, per million tokens (`cached` default: the input price)."""
        rates = (input, output, input if cached is None else cached)
        if any(not math.isfinite(r) or r < 0 for r in rates):
            raise UserError(f"prices per million tokens must be numbers at least 0, not {rates}")
        return cls(per_million=rates)

    @property
    def label(self) -> str:
        """Which price this is, as records and events say it: `genai-prices:openai`, or
        `usd-per-million:0.4/1.6/0.1` (input/output/cached)."""
        if self.per_million is not None:
            return "usd-per-million:" + "/".join(f"{r:g}" for r in self.per_million)
        return f"genai-prices:{self.provider}"


FREE = Pricing.usd_per_million(0, 0, 0)
"""The price of a model that runs on this machine (`local`): nothing."""


def request_cost(pricing: Pricing | None, usage: Usage, *model_refs: str) -> float | None:
    """What one request with `usage` costs, in US dollars, on the first of `model_refs` the table
    has a price for (the model's name as it was asked for, then as the provider's answer named it:
    `gpt-4.1-mini`, `gpt-4.1-mini-2025-04-14`); None when there is no price for any. A price per
    million tokens prices every request."""
    if pricing is None:
        return None
    if pricing.per_million is not None:
        rate_in, rate_out, rate_cached = pricing.per_million
        cached = usage.cache_read_tokens
        fresh = usage.input_tokens + (usage.cache_write_tokens if pricing.cache_apart else -cached)
        return (max(0, fresh) * rate_in + cached * rate_cached + usage.output_tokens * rate_out) / 1_000_000
    model_ref = next((ref for ref in model_refs if ref and _known(pricing.provider, ref.lower())), None)
    if model_ref is None:
        return None
    from genai_prices import Usage as Tokens
    from genai_prices import calc_price

    cached = usage.cache_read_tokens + usage.cache_write_tokens if pricing.cache_apart else 0
    tokens = Tokens(
        input_tokens=usage.input_tokens + cached,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    try:
        if "://" in pricing.provider:
            price = calc_price(tokens, model_ref, provider_api_url=pricing.provider)
        else:
            price = calc_price(tokens, model_ref, provider_id=pricing.provider)
    except (LookupError, ValueError):
        return None
    return float(price.total_price)


@cache
def _known(provider: str, model_ref: str) -> bool:
    """Whether the table prices `model_ref` at `provider` (looked up once a pair: a miss raises,
    and a model without a price is asked about on every request)."""
    from genai_prices.data_snapshot import get_snapshot

    snapshot = get_snapshot()
    try:
        if "://" in provider:
            snapshot.find_provider_model(model_ref, None, None, provider)
        else:
            snapshot.find_provider_model(model_ref, None, provider, None)
    except LookupError:
        return False
    return True


def parse_price(text: str, where: str) -> Pricing | None:
    """A price as the operator writes it (`where` names where, in errors): a provider id of
    `genai-prices`' table (`openai`, `anthropic`, `groq`, ...: that provider's prices for the
    model's name), `usd:IN/OUT[/CACHED]` (US dollars per million input, output and cached input
    tokens), or `none` (no price: cost unknown). Raises `UserError` saying what is accepted."""
    value = text.strip()
    if value == "none":
        return None
    kind, colon, rest = value.partition(":")
    if colon and kind == "usd":
        try:
            rates = [float(r) for r in rest.split("/")]
        except ValueError:
            rates = []
        if len(rates) not in (2, 3):
            raise UserError(f"{where}: {value!r} is not usd:IN/OUT[/CACHED], e.g. usd:0.4/1.6/0.1 (per million tokens)")
        return Pricing.usd_per_million(*rates)
    if value in _providers():
        return Pricing(provider=value)
    raise UserError(
        f"{where}: {value!r} is not a price: write a provider of genai-prices' table (e.g. openai, anthropic, "
        "groq, google), usd:IN/OUT[/CACHED] per million tokens, or none"
    )


@dataclass(frozen=True, slots=True)
class ModelPrices:
    """The operator's prices: per model string (`openai:gpt-4.1-mini`), and for every other model
    (`fallback`, an entry without a model: None when there is none). Each value is a `Pricing`, or
    None for `none` (no price)."""

    by_model: Mapping[str, Pricing | None]
    fallback: tuple[Pricing | None] | None = None

    @classmethod
    def load(cls, given: Mapping[str, str] | Sequence[str] = ()) -> ModelPrices:
        """`DELEGATE_PRICES`, then `given` over it (`--price`, `Extensions.model_prices`): entries
        `[MODEL=]PRICE` (a mapping: model to price). Raises `UserError` naming where."""
        table: dict[str, Pricing | None] = {}
        fallback: tuple[Pricing | None] | None = None
        entries: list[tuple[str, str, str]] = [
            (*_split(entry), PRICES_ENV) for entry in os.environ.get(PRICES_ENV, "").split(",") if entry.strip()
        ]
        if isinstance(given, Mapping):
            entries += [(model, price, "model_prices") for model, price in given.items()]
        else:
            entries += [(*_split(entry), "--price (model_prices)") for entry in given if entry.strip()]
        for model, price, where in entries:
            pricing = parse_price(price, where)
            if model:
                table[model.strip()] = pricing
            else:
                fallback = (pricing,)
        return cls(table, fallback)

    def override(self, model: str) -> tuple[Pricing | None] | None:
        """The operator's price for `model` (a 1-tuple: its value may be None, no price), or None
        when the operator said nothing of it: the model's own price holds."""
        if model in self.by_model:
            return (self.by_model[model],)
        return self.fallback


def _split(entry: str) -> tuple[str, str]:
    """`MODEL=PRICE` as (model, price); a `PRICE` alone as ("", price)."""
    model, sep, price = entry.strip().rpartition("=")
    return (model, price) if sep else ("", entry.strip())


def table_at(base_url: str | None, protocol: str) -> str:
    """The table that prices a model of `protocol` (`openai`, `anthropic`) reached at `base_url`:
    the provider's that `genai-prices` knows to answer there (Groq at api.groq.com), else the
    protocol's own (behind a gateway, a proxy or a server of one's own: the model's name is
    the provider's)."""
    if base_url:
        from genai_prices.data_snapshot import get_snapshot

        for provider in get_snapshot().providers:
            if provider.api_pattern and re.match(provider.api_pattern, base_url):
                return provider.id
    return protocol


@cache
def _providers() -> frozenset[str]:
    from genai_prices.data_snapshot import get_snapshot

    return frozenset(p.id for p in get_snapshot().providers)
