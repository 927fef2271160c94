"""The model seam: one async method that takes a request and returns a response."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from .._empty import empty_dict, empty_list
from .._errors import UserError
from .._messages import HasParts, Message, Part, ReasoningPart
from .._usage import Usage
from ._prices import Pricing

PathRole = Literal["existing", "new"]
"""What a path parameter names: a file that exists (to read), or a new one (to create)."""

PathState = Literal["file", "absent", "other"]
"""What the workspace holds at a path: a file, nothing yet, or something else (a folder, or a
path that leaves the workspace)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IdChoice:
    """The values an id parameter may take (a batch id, a subagent type): the ones that exist now
    (`known`), and ids of this kind that the conversation mentions (`pattern`, a regular
    expression: a batch submitted during the run is named in `batch_task`'s result)."""

    known: tuple[str, ...] = ()
    pattern: str | None = None


@dataclass(kw_only=True, slots=True)
class ToolSpec:
    """What a model is told of a tool: its name, what it does, and a JSON schema of its input."""

    name: str
    description: str
    parameters: dict[str, Any]
    path_params: dict[str, PathRole] = field(default_factory=empty_dict)
    """Parameters that name workspace paths, and whether the file must already exist or be new
    (never sent to a provider). A constrained model may only fill them with paths its
    conversation mentions: see `_constrained.py`."""
    id_params: dict[str, IdChoice] = field(default_factory=empty_dict)
    """Parameters that name something that must exist (never sent to a provider). A constrained
    model may only fill them with one of its `IdChoice`'s values, so it cannot invent one: see
    `_constrained.py`."""
    one_of: tuple[str, ...] = ()
    """Optional parameters of which a call must give one (`task`'s `prompts` or `prompt`). JSON
    Schema says this with a top-level `anyOf`, which providers refuse in tool schemas; the tool
    checks it, and a constrained model's grammar holds to it (offering exactly one of them)."""


ToolChoice = str
"""`auto` (the model chooses), `required` (it must call some tool), `none` (it must answer, calling
no tool), or the name of the one tool it must call."""

FREE_CHOICES = ("auto", "required", "none")


@dataclass(kw_only=True, slots=True)
class ModelRequest:
    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=empty_list)
    max_tokens: int | None = None
    temperature: float | None = None
    tool_choice: ToolChoice = "auto"
    """`required`: the answer must call a tool (no text-only answer); `none`: it must not; a tool's
    name: that tool."""
    path_states: Mapping[str, PathState] | None = None
    """What the workspace holds at each path the conversation mentions, for a model that grounds
    path arguments in it (one whose `profile.grounds_paths` is true; the loop fills it only for those).
    Plain data: a model never sees the workspace itself."""


FinishReason = Literal["end_turn", "tool_use", "max_tokens", "other"]
"""What the provider said of why its answer ended (each adapter maps its own words onto these);
not why an agent ended, which is `delegate._record.StopReason`."""


@dataclass(kw_only=True, slots=True)
class ModelResponse(HasParts):
    """A model's answer. `usage` is as the provider reports it; `context_tokens` is the size of the
    conversation after this answer, when the provider counts it differently from input plus output
    (Anthropic reports cached prompt tokens apart from `input_tokens`; OpenAI includes them)."""

    parts: list[Part]
    usage: Usage = field(default_factory=Usage)
    finish_reason: FinishReason = "end_turn"
    model: str = ""
    context_tokens: int | None = None

    @property
    def reasoning(self) -> list[ReasoningPart]:
        return [p for p in self.parts if isinstance(p, ReasoningPart)]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelProfile:
    """What a model can do, declared by its provider (`Model.profile`) and read by the loop; the
    defaults suit a capable hosted model.

    ```python
    class MyModel:
        name = "mine:small"
        profile = ModelProfile(context_window=32_768, when_stuck="Try a larger model.")

        async def complete(self, request: ModelRequest) -> ModelResponse: ...
        async def aclose(self) -> None: ...
    ```
    """

    context_window: int | None = None
    """Tokens the model reads at once; None: the table of known models by name, else
    `DEFAULT_CONTEXT_WINDOW` (see `delegate.models.context_window`). The loop compacts and cuts
    the conversation to fit it."""
    grounds_paths: bool = False
    """Whether the model grounds path arguments in what the workspace holds: the loop then fills
    each request's `path_states`, and an agent's opening turns are shaped for a weak model."""
    when_stuck: str = ""
    """What to tell a user whose agent went round in circles on this model (the local model says:
    use a real one); empty: nothing more than what the loop guard says."""
    pricing: Pricing | None = None
    """Whose prices (in `genai-prices`' table) its requests cost: the loop prices each answer's
    usage with it (`Usage.cost_usd`). None: the model has no price, and its cost is unknown."""

    def __post_init__(self) -> None:
        if self.context_window is not None and self.context_window < 1:
            raise UserError(f"context_window={self.context_window}: give the model's window in tokens, at least 1")


@runtime_checkable
class Model(Protocol):
    """A model provider: `name` is the `provider:model` string it was built from, `profile` what
    it can do (`ModelProfile`), `complete` one request, `aclose` closes the connections it opened
    in the running event loop (a model with none returns at once)."""

    @property
    def name(self) -> str: ...

    @property
    def profile(self) -> ModelProfile: ...

    async def complete(self, request: ModelRequest) -> ModelResponse: ...

    async def aclose(self) -> None: ...


def warm_up(call: Callable[[], Coroutine[Any, Any, object]], name: str) -> None:
    """Run `call` (a request that never leaves the process, to import what a first request needs)
    on a thread of its own, with its own event loop, and wait for it. A warm-up that fails costs
    the first request its time, no more."""

    def run() -> None:
        with contextlib.suppress(Exception):
            asyncio.run(call())

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
