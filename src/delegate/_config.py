"""How runs run, as three frozen objects, each validated when it is made and passed whole (and the
two settings they hold: `LoopGuard`, when an agent is going round in circles, and `Compaction`, when
older turns are summarised). Plain data, read by the loop, the assembler and the run layer alike.

- `RunLimits`: what one run may spend: its time, tokens, model requests, dollars, and subagents (at once
  and in all). `Runtime(limits=...)` sets them for every run; `run(..., limits=...)` for one.
- `LoopSettings`: how every agent's loop runs: compaction, the context window, the loop guard, the
  heartbeat of live subagents.
- `Extensions`: what a runtime loads besides the definitions given in code: definition and skill
  folders, MCP servers and how their tools are offered, the model alias table.

Modelled on `delegate.server.Limits` (and openai-agents' `RunConfig`, pydantic-ai's `UsageLimits`):
a setting is one field of one of these, so adding one touches its field, the flag that sets it,
and the code that reads it, nothing in between.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from os import PathLike
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from ._errors import UserError

if TYPE_CHECKING:
    from .mcp import MCPServerConfig
    from .models import Model
    from .permissions import Permissions

LOCAL_USER = "default"
"""The user of the command line and the Python API: it works in the workspace itself (a user of
`delegate serve` works in a folder of its own)."""
CANCEL_WAIT = 10.0
"""How long a cancellation asked from another process (`delegate runs cancel`,
`POST /runs/{id}/cancel`) waits for the run to record that it was cancelled."""
DEFAULT_RUN_TIMEOUT = 3600.0
"""Seconds a lead may run before it ends `timed_out` (subagents included), unless told otherwise."""
DEFAULT_STALL_TIMEOUT = 300.0
"""Seconds a tool call or model request may go without progress before the idle watchdog ends it:
the OpenAI adapter's read timeout, and Codex's stream idle timeout. A command that prints nothing
for five minutes, an MCP call that neither answers nor reports progress that long, is taken for
stuck; a longer quiet command can say so (`RunLimits.stall_timeout`, `--stall-timeout`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopGuard:
    """When an agent is going round in circles: `repeated_failures` failures of the same call, or
    `idle_steps` turns in a row without progress (see the module's doc). None switches a rule off."""

    repeated_failures: int | None = 3
    idle_steps: int | None = 10

    def __post_init__(self) -> None:
        for name in ("repeated_failures", "idle_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise UserError(f"LoopGuard {name}={value!r}: give a whole number of at least 1, or None for no limit")


@dataclass(kw_only=True, slots=True)
class Compaction:
    """When the context passes `max_context_tokens`, older turns are replaced by a summary.

    The first message (the task) and the last `keep_recent` messages stay as they are. `model`
    writes the summary; `None` means the agent's own model. Without one, an agent compacts at
    `COMPACT_AT` of its model's context window; with one, at whichever comes first.
    """

    max_context_tokens: int
    keep_recent: int = 6
    model: Model | None = None


def _whole_from(value: object, least: int) -> bool:
    """Whether `value` is a whole number (not a bool) of at least `least`: a stored run's limits are checked."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _whole(owner: str, name: str, value: object, *, least: int = 1, none: str = "no limit") -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least):
        raise UserError(f"{owner} {name}={value!r}: give a whole number of at least {least}, or None for {none}")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunLimits:
    """What one run may spend, the lead and all its subagents together. None is no limit.

    `timeout`: seconds the run may take (it then ends `timed_out`). `token_budget`,
    `max_requests` and `cost_budget`: tokens (input and output), model requests and US dollars
    (priced by `genai-prices`; a model without a price cannot be held to it); once one is spent no
    new model request starts and the run ends `aborted`, its stop reason `run_token_budget`,
    `run_max_requests` or `run_cost_budget`. `max_parallel`: subagents running at once.
    `max_subagents`: subagents the run may start in all, its `task` calls' and its workflows'
    agents alike (the lead is told when it asks for more; a workflow's agent past it never starts).
    `workflow_agents`: how many of them the run's workflows may start, across all of them.
    `layers_kept`: seconds the
    layer of an overlay subagent that was not merged (a conflict, a failure) is kept before a
    later run sweeps it (default a day; see `docs/isolation.md`). `approval_timeout`: seconds a
    call may wait for a person's decision (an `ask` permission rule) before it is denied with "no
    decision within S s" (None: it waits as long as it takes). Waiting never counts against
    `timeout`. `stall_timeout`: seconds a tool call, an MCP call or a model request may go without
    progress (a command's output, an MCP progress notification, a chunk of a model's stream)
    before the idle watchdog ends it: the call's result says which call hung and how long, and
    its agent goes on; a model request that hangs ends its agent `timed_out` (stop reason
    `stalled`), a subagent's result for its lead. Waiting for a person never counts; `task`,
    `task_wait`, `task_message` and `workflow` are not watched (their agents' calls are). None:
    never (default 300). `max_depth`: how many levels of subagents the run may have (default 1:
    the lead's subagents cannot delegate; 2: they may start subagents of their own, which cannot;
    see `docs/subagents.md`, "Nested subagents"). Every level spends the run's budgets.
    """

    timeout: float | None = DEFAULT_RUN_TIMEOUT
    token_budget: int | None = None
    max_requests: int | None = None
    cost_budget: float | None = None
    max_parallel: int | None = 16
    max_subagents: int | None = 1000
    layers_kept: float = 86_400.0
    approval_timeout: float | None = None
    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT
    workflow_agents: int | None = 1000
    """Agents the run's workflows may start in all (every `workflow` call and a run that is a
    workflow count against it, and against `max_subagents` too)."""
    max_depth: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Every limit by name: what the store keeps with a run, so its resume runs under them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def over(self, given: Mapping[str, Any]) -> RunLimits:
        """These limits with those `given` names in their place (a stored run's `to_dict`; a name
        this version does not know is passed over). `UserError` if a value is not a limit."""
        known = {f.name for f in fields(self)}
        return replace(self, **{name: value for name, value in given.items() if name in known})

    def under(self, given: Mapping[str, Any]) -> RunLimits:
        """These limits with those `given` in their place, each no looser than this one's own (see
        `limits_within`): how `delegate serve`'s limits hold over a request's, and a runtime's over a
        batch item's."""
        return self.over(limits_within(self.to_dict(), given))

    @classmethod
    def given(cls, limits: Mapping[str, Any]) -> dict[str, Any]:
        """`limits` by their names, checked as a run's own (None: not given, left out): what a
        batch and its items take. `UserError` naming an unknown limit, or saying what to give."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(limits) - set(names))
        if unknown:
            raise UserError(f"unknown limit(s) {', '.join(map(repr, unknown))}; the run limits are {', '.join(names)}")
        given = {name: value for name, value in limits.items() if value is not None}
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise UserError(f"RunLimits {name}={value!r}: give a number, or leave it out (null in JSON)")
            problem = _limit_problem(name, value)
            if problem is not None:  # said for JSON and the command line: leaving a limit out keeps the one above
                raise UserError(f"RunLimits {name}={value!r}: {problem}, or leave it out (null in JSON)")
        return given

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            problem = None if value is None and f.name in _NONE_MEANS else _limit_problem(f.name, value)
            if problem is not None:
                none = _NONE_MEANS.get(f.name)
                raise UserError(f"RunLimits {f.name}={value!r}: {problem}" + (f", or None {none}" if none else ""))


_NONE_MEANS = {
    "timeout": "for no deadline",
    "token_budget": "for no limit",
    "max_requests": "for no limit",
    "cost_budget": "for no limit",
    "max_parallel": "for no limit",
    "max_subagents": "for no limit",
    "approval_timeout": "to wait for a decision",
    "stall_timeout": "for no idle watchdog",
    "workflow_agents": "for no limit",
}
"""What None is for each `RunLimits` field that may be None (in Python; JSON's null and an option
left out keep the limit above it instead)."""


def _limit_problem(name: str, value: object) -> str | None:
    """What to give for the run limit `name` when `value` is not one (None: it is)."""
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if name == "layers_kept":
        return None if number is not None and number >= 0 else "give seconds, 0 or more"
    if name in ("timeout", "cost_budget", "approval_timeout", "stall_timeout"):
        if number is not None and number > 0:
            return None
        return "give positive US dollars" if name == "cost_budget" else "give positive seconds"
    if _whole_from(value, 1):
        return None
    return "give a whole number of at least 1" + (" (1: subagents cannot delegate)" if name == "max_depth" else "")


def limits_within(caps: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """`caps` (limits by their `RunLimits` names) with `given` over them, each given value no
    looser than the cap of its name: a limit may be tightened, never loosened past one set (a cap
    that is None or absent is no cap; a given None is not given). The one rule for the operator's
    limits over an HTTP request's, a batch's over its items' and a runtime's over a batch item's."""
    merged = dict(caps)
    for name, value in given.items():
        if value is not None:
            cap = caps.get(name)
            merged[name] = value if cap is None else min(value, cap)
    return merged


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopSettings:
    """How every agent's loop runs (the lead's and its subagents').

    `compaction`: when older turns are summarised (default: at 70% of the context window).
    `context_window`: tokens every agent's model reads at once, over what each model says (None:
    theirs; see `delegate.models.context_window`). `guard`: ends an agent that goes round in
    circles (the same call failing 3 times, or 10 turns without progress; None: never).
    `heartbeat_interval`: seconds between the `subagent.heartbeat` events of live subagents.
    """

    compaction: Compaction | None = None
    context_window: int | None = None
    guard: LoopGuard | None = field(default_factory=LoopGuard)
    heartbeat_interval: float = 5.0

    def __post_init__(self) -> None:
        _whole("LoopSettings", "context_window", self.context_window, least=1024, none="each model's own")
        if isinstance(self.heartbeat_interval, bool) or not self.heartbeat_interval > 0:
            raise UserError(f"LoopSettings heartbeat_interval={self.heartbeat_interval!r}: give positive seconds")


@dataclass(frozen=True, kw_only=True, slots=True)
class Extensions:
    """What a runtime loads besides the definitions given in code.

    `agents_dirs` and `skills_dirs`: folders of subagent definitions and of skills, besides the
    workspace's `.claude/` and `.delegate/` ones (folders inside the workspace are read-only to
    agents). `builtin_subagents`: offer the built-in types (`general-purpose`, `explore`, `bash`).
    `mcp_servers`: MCP servers whose tools agents get; with `tool_search` they stay hidden behind
    the `tool_search` tool until found, the `auto_promote` that best match a task loaded from its
    first turn. `model_aliases`: entries over the table that resolves `sonnet`, `opus`, ... (a
    mapping, or `alias=provider:model` strings; see `delegate.models`). `shared`: the operator's
    folder when the workspace is one user's (in `delegate serve`): definitions and skills are read
    from it first, the workspace's own shadowing them by name. `permissions`: the rules of which
    calls run, wait for a person or are refused, the permission mode, and the hooks (a
    `Permissions`, merged with those of the operator's settings files: see docs/approvals.md).
    `user_level`: the operator's user-level folder, read as Claude Code reads `~/.claude`: its
    `agents/` and `skills/` come first, every other source shadowing them by name (`delegate run`
    gives `~/.claude`; `delegate serve` never does). None: none. `outputs`: the folder, inside
    the workspace, where agents write what they deliver (spec 002's outputs directory, spelt
    `/mnt/user-data/outputs` too; made when a run starts, and named in every agent's prompt).
    `model_prices`: how models built from strings are priced, over `DELEGATE_PRICES` (a mapping of
    model string to price, or `[model=]price` strings as `--price` takes them; a price is a provider
    of `genai-prices`' table, `usd:IN/OUT[/CACHED]` per million tokens, or `none`: see
    `delegate.models._prices.parse_price`).
    """

    agents_dirs: Sequence[str | PathLike[str]] = ()
    skills_dirs: Sequence[str | PathLike[str]] = ()
    builtin_subagents: bool = True
    mcp_servers: Sequence[MCPServerConfig] = ()
    tool_search: bool = True
    auto_promote: int = 3
    model_aliases: Mapping[str, str] | Sequence[str] = ()
    shared: str | PathLike[str] | None = None
    user_level: str | PathLike[str] | None = None
    permissions: Permissions | None = None
    outputs: str | PathLike[str] = "outputs"
    model_prices: Mapping[str, str] | Sequence[str] = ()

    def __post_init__(self) -> None:
        try:
            outputs: PurePosixPath | None = PurePosixPath(os.fspath(self.outputs))
        except TypeError:  # not a path at all
            outputs = None
        if outputs is None or outputs.is_absolute() or not outputs.parts or ".." in outputs.parts:
            raise UserError(
                f"Extensions outputs={self.outputs!r}: give a folder inside the workspace, relative to it "
                "(default 'outputs')"
            )
        if outputs.parts[0] in (".delegate", ".claude", ".git"):
            raise UserError(f"Extensions outputs={self.outputs!r}: agents cannot write in {outputs.parts[0]}/")
        object.__setattr__(self, "outputs", outputs.as_posix())
        for name in ("agents_dirs", "skills_dirs", "mcp_servers"):
            value = getattr(self, name)
            if isinstance(value, (str, PathLike)):
                raise UserError(f"Extensions {name} is one path, not a list: write {name}=[{os.fspath(value)!r}]")
            object.__setattr__(self, name, tuple(value))
        _whole("Extensions", "auto_promote", self.auto_promote, least=0)
