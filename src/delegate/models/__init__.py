"""Model providers behind one seam, resolved from `provider:name` strings.

Provider SDKs are imported only when a model of theirs is built (or `OpenAIModel` and
`AnthropicModel` are first named), so `import delegate` stays fast. Also here, as the lowest layer
that makes them: the progress marks the idle watchdog reads (`_progress.py`: each event of a
model's stream, a command's output, an MCP notification marks one) and where delegate keeps what
it can make again (`cache_root`: the local model's weights, the demo's folder).

Its `__all__` is for extension authors; users import from `delegate` (docs/api.md).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import _lazy
from .._errors import UserError, require_extra
from ._aliases import DEFAULT_ALIASES, PROVIDERS, ModelAliases, credentials_hint, has_credentials
from ._base import (
    FREE_CHOICES,
    FinishReason,
    IdChoice,
    Model,
    ModelProfile,
    ModelRequest,
    ModelResponse,
    PathRole,
    PathState,
    ToolChoice,
    ToolSpec,
)
from ._cache import cache_root
from ._constrained import mentioned_paths
from ._prices import ModelPrices, Pricing, request_cost
from ._progress import WATCHED, Progress, progress, watched
from ._retry import DEFAULT_DEADLINE, RetryPolicy
from ._window import (
    DEFAULT_CONTEXT_WINDOW,
    KNOWN_CONTEXT_WINDOWS,
    MessageTally,
    context_window,
    estimate_tokens,
    fixed_chars,
    known_context_window,
    message_chars,
    part_chars,
    tokens_of,
)

if TYPE_CHECKING:
    from ._anthropic import AnthropicModel
    from ._local import local_model_ready, prepare_local_model
    from ._openai import OpenAIModel

__all__ = [
    "DEFAULT_ALIASES",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_DEADLINE",
    "FREE_CHOICES",
    "KNOWN_CONTEXT_WINDOWS",
    "LOCAL_FILE_REFUSED",
    "WATCHED",
    "AnthropicModel",
    "FinishReason",
    "IdChoice",
    "MessageTally",
    "Model",
    "ModelAliases",
    "ModelPrices",
    "ModelProfile",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "PathRole",
    "PathState",
    "Pricing",
    "Progress",
    "RetryPolicy",
    "ToolChoice",
    "ToolSpec",
    "cache_root",
    "context_window",
    "credentials_hint",
    "estimate_tokens",
    "fixed_chars",
    "has_credentials",
    "known_context_window",
    "local_model_ready",
    "mentioned_paths",
    "message_chars",
    "names_a_local_file",
    "part_chars",
    "prepare_local_model",
    "progress",
    "request_cost",
    "resolve_model",
    "tokens_of",
    "watched",
]


__getattr__ = _lazy.lazy_names(
    __name__,
    {
        "AnthropicModel": "._anthropic",
        "OpenAIModel": "._openai",
        "local_model_ready": "._local",
        "prepare_local_model": "._local",
    },
)
"""The adapters and the embedded model's set-up, imported when first named (their SDKs and
llama.cpp are heavy)."""


def resolve_model(spec: str | Model | None, prices: ModelPrices | None = None) -> Model:
    """Build a model from a `provider:name` string (or return a `Model` as it is), priced as
    `prices` say (default: `DELEGATE_PRICES`; a model they do not name keeps its own price).

    `None` takes `DELEGATE_MODEL`. Raises `UserError` naming the providers for a bad string, and
    for a missing key before any provider's SDK is imported (that takes seconds).
    """
    if spec is None:
        named = os.environ.get("DELEGATE_MODEL")
        spec = named or default_model_spec()
        if not named and spec == "local":  # never chosen in silence (the CLI asks or refuses before here)
            import logging  # here: `import delegate` stays small

            logging.getLogger("delegate").warning(NO_MODEL_IN_CODE)
    if not isinstance(spec, str):
        return spec
    provider, _, name = spec.partition(":")
    given = (prices or ModelPrices.load()).override(spec.strip())
    pricing: Pricing | bool = True if given is None else (given[0] or False)
    if provider == "openai":
        if not name:
            raise UserError("model 'openai:' needs a model name, for example 'openai:gpt-4.1-mini'")
        from ._openai import OpenAIModel

        return OpenAIModel(name, pricing=pricing)
    if provider == "anthropic":
        if not name:
            raise UserError("model 'anthropic:' needs a model name, for example 'anthropic:claude-sonnet-4-5'")
        if not has_credentials(spec):  # said before the SDK's import, which takes seconds
            raise UserError(
                f"model '{spec}' needs an API key: set ANTHROPIC_API_KEY "
                "(and ANTHROPIC_BASE_URL for a server other than api.anthropic.com)"
            )
        require_extra("anthropic", "anthropic", f"model {spec!r}")
        from ._anthropic import AnthropicModel

        return AnthropicModel(name, pricing=pricing)
    if provider == "local":
        from ._local import local_model

        return local_model(name or None, pricing=pricing)
    known = ", ".join(f"'{p}:<model>'" if p != "local" else "'local'" for p in PROVIDERS)
    if ":" not in spec:  # a model's name alone (`gpt-4.1-mini`): say which string it wants
        raise UserError(f"model {spec!r} names no provider: write 'openai:{spec}' (or another of {known})")
    raise UserError(f"unknown model provider in {spec!r}: use one of {known}")


LOCAL_FILE_REFUSED = "model 'local:<path>' names a model file on the server: use 'local', or ask its operator"


def names_a_local_file(spec: str) -> bool:
    """Whether `spec` is `local:<path>`: a file of the machine's, for its operator alone to name
    (`delegate serve` refuses it from HTTP users)."""
    provider, _, name = spec.strip().partition(":")
    return provider == "local" and bool(name)


NO_MODEL_IN_CODE = (
    "no model configured: running the small embedded model (SmolLM2-135M: slow, and weak at real work). "
    "Give one, e.g. Runtime(model='openai:gpt-4.1-mini') with OPENAI_API_KEY, or set DELEGATE_MODEL; "
    "model='local' says you mean this one"
)
"""Said (a `delegate` logger warning, on stderr unless logging is set up otherwise) when code that
named no model, with no `DELEGATE_MODEL` and no provider's key, gets the embedded model."""


def default_model_spec() -> str:
    """The model used when none is configured: a provider with a key in the environment, else local."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return "openai:gpt-4.1-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-4-5"
    return "local"
