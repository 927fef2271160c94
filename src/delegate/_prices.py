"""What a model request costs, in US dollars, from `genai-prices`' table (pydantic's maintained
price list, bundled with the package: it is never fetched at run time, so a price is the one of the
installed version; upgrade the package for newer prices).

A model declares whose table prices it (`ModelProfile.pricing`); a model without one (the local
model, the test fakes, an OpenAI-compatible server the table does not know) has no price, and its
requests cost `None`: never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._usage import Usage


@dataclass(frozen=True, kw_only=True, slots=True)
class Pricing:
    """Whose prices a model's requests are charged at.

    `provider`: a provider id of `genai-prices` (`openai`, `anthropic`, `groq`, ...) or the URL of
    the API the model is reached at (the table knows which provider answers there; a URL it does
    not know, such as a server on this machine, gives no price). `cache_apart`: the provider's
    `input_tokens` leave out the cached part of the prompt (Anthropic's do; OpenAI's include it, as
    the table counts them)."""

    provider: str
    cache_apart: bool = False


def request_cost(pricing: Pricing | None, usage: Usage, *model_refs: str) -> float | None:
    """What one request with `usage` costs, in US dollars, on the first of `model_refs` the table
    has a price for (the model's name as it was asked for, then as the provider's answer named it:
    `gpt-4.1-mini`, `gpt-4.1-mini-2025-04-14`); None when there is no price for any."""
    if pricing is None:
        return None
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
