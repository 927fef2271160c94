"""Tools: typed Python functions whose JSON schema comes from their signature.

```python
@tool
def read_file(ctx: ToolContext, path: Annotated[str, Field(description="...")]) -> str:
    "Read a file of the workspace."
```

A parameter that names workspace files is marked `Annotated[str, PathParam(), ...]` (or
`PathParam("new")` for a file to create; or `list[str]`): models that decode under a grammar are
then held to paths they were told of.

A tool's failure never crashes the loop: bad arguments and `ToolError`s (and any other
exception) become an error result that the model reads and can act on.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from time import time
from typing import Any, cast, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from .._empty import empty_list
from .._errors import ToolError
from .._events import Event, EventSink, EventType, unheard
from .._messages import Message
from .._usage import Usage
from ..models import IdChoice, PathRole, ToolSpec
from ..workspace import Workspace


@dataclass(frozen=True, slots=True)
class PathParam:
    """Marks a tool parameter as naming workspace paths: of files that exist (to read) or of
    new ones (to create). See `ToolSpec.path_params`."""

    role: PathRole = "existing"


@dataclass(kw_only=True, slots=True)
class ToolReturn:
    """A tool's answer. `content` goes to the model; `keep` survives compaction; `data` is for code;
    `progress` tells the loop guard that the call changed something."""

    content: str
    keep: str | None = None
    data: Any = None
    progress: bool = False
    """The call changed something (wrote a file, ran a subagent that delivered): the loop guard
    counts it as progress even when the same call was made before."""


@dataclass(kw_only=True)
class ToolContext:
    """What a tool may know of the agent that calls it. Built fresh for every agent."""

    run_id: str
    agent_id: str
    workspace: Workspace
    emit: EventSink
    parent_agent_id: str | None = None
    parent_tool_call_id: str | None = None
    user_id: str = "default"
    timezone: str = "UTC"
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    """The agent's turns so far (kept, like `usage`, when it is cancelled)."""
    tool_call_id: str | None = None
    model_call_id: str | None = None
    """The id the model gave the call: `tool_call_id` unless the model repeated an id, which the
    loop then names `<id>_<n>` (what a tool that is idempotent per model call keys on)."""
    conversation: list[Message] = field(default_factory=empty_list)
    """The agent's messages as of the current turn (read by `task` for snapshots)."""
    uploaded_files: list[dict[str, Any]] | None = None
    """The run's uploads state (see `_uploads.py`); None when the run has none."""

    @property
    def heard(self) -> bool:
        """Whether an event would reach a store or a sink (see `unheard`): the loop builds an
        event's data only then."""
        return self.emit is not unheard

    def event(
        self,
        type: EventType,
        data: dict[str, Any],
        *,
        tool_call_id: str | None = None,
        detail: object = None,
        ts: float | None = None,
    ) -> None:
        """Emit an event of this agent, at `ts` (default: now; a model's answer is dated when it came)."""
        if self.emit is not unheard:  # by position (see `Event`): type, run_id, agent_id, parent_agent_id,
            # tool_call_id, data, ts, detail
            when = time() if ts is None else ts
            self.emit(Event(type, self.run_id, self.agent_id, self.parent_agent_id, tool_call_id, data, when, detail))

    def for_call(self, tool_call_id: str, model_call_id: str | None = None) -> ToolContext:
        """A shallow copy that knows which tool call it serves (calls of one turn run concurrently),
        and the id the model gave it (default: the same)."""
        copy = ToolContext.__new__(ToolContext)
        copy.__dict__.update(self.__dict__)
        copy.tool_call_id = tool_call_id
        copy.model_call_id = model_call_id or tool_call_id
        return copy


ToolFunction = Callable[..., Any]


class Tool:
    """A tool the model can call. Build one with `@tool` or `Tool.from_function`."""

    def __init__(
        self,
        *,
        name: str,
        description: str,
        parameters: dict[str, Any],
        function: Callable[[ToolContext, dict[str, Any]], Awaitable[Any] | Any],
        validator: type[BaseModel] | None = None,
        stop: bool = False,
        path_params: dict[str, PathRole] | None = None,
        one_of: tuple[str, ...] = (),
        talks_to_user: bool = False,
        id_params: dict[str, IdChoice] | None = None,
        watched: bool = True,
    ) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters
        self.stop = stop
        self.talks_to_user = talks_to_user
        """The tool asks the user something or shows them something (`ask_user`, `present_files`,
        ...): subagents never inherit it, whatever its name; a definition must list it by name."""
        self.watched = watched and not talks_to_user
        """The idle watchdog ends a call of it that makes no progress for `RunLimits.stall_timeout`
        seconds. Not a tool that waits for a person, nor one that runs agents (`task`, `workflow`:
        each of their agents' calls is watched itself)."""
        self._function = function
        self._validator = validator
        self.spec = ToolSpec(
            name=name,
            description=description,
            parameters=parameters,
            path_params=dict(path_params or {}),
            id_params=dict(id_params or {}),
            one_of=one_of,
        )

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @classmethod
    def from_function(
        cls,
        fn: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        stop: bool = False,
        talks_to_user: bool = False,
        watched: bool = True,
    ) -> Tool:
        """Make a tool of a typed function; a first parameter annotated `ToolContext` gets the
        context. `watched=False` keeps the idle watchdog off its calls (see `Tool.watched`)."""
        tool_name = name or fn.__name__
        validator, schema, path_params, takes_ctx = _parameters(fn, tool_name)
        is_async = inspect.iscoroutinefunction(fn)

        async def call(ctx: ToolContext, args: dict[str, Any]) -> Any:
            result = fn(ctx, **args) if takes_ctx else fn(**args)
            return await result if is_async else result

        return cls(
            name=tool_name,
            description=inspect.cleandoc(description or fn.__doc__ or tool_name),
            parameters=schema,
            function=call,
            validator=validator,
            stop=stop,
            path_params=path_params,
            talks_to_user=talks_to_user,
            watched=watched,
        )

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check the arguments against the schema; raise `ToolError` saying what is wrong."""
        if self._validator is None:
            return arguments
        try:
            model = self._validator.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(f"invalid arguments for {self.name}: {_describe(exc)}") from None
        return dict(model.__dict__)  # its fields, validated (extra ones are forbidden)

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolReturn:
        """Validate and run. Raises `ToolError` (or whatever the function raised)."""
        return await self.run_valid(ctx, self.validate(arguments))

    async def run_valid(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolReturn:
        """Run with `arguments` that `validate` gave back (what a guarded tool does: it validates
        before it judges the call). Raises `ToolError` (or whatever the function raised)."""
        result = self._function(ctx, arguments)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, ToolReturn):
            return result
        if isinstance(result, str):
            return ToolReturn(content=result)
        return ToolReturn(content=_to_text(result), data=result)


_Parameters = tuple[type[BaseModel], dict[str, Any], dict[str, PathRole], bool]
_parameters_made: dict[tuple[object, ...], _Parameters] = {}
"""The parameters of functions whose annotations are all text (`from __future__ import
annotations`), by code object and defaults: a function defined anew for each run (a closure,
such as the batch tools bound to a run's store) has the same ones every time, and building them
costs milliseconds."""


def _parameters(fn: ToolFunction, tool_name: str) -> _Parameters:
    """`fn`'s argument validator, JSON schema, path parameters, and whether it takes the context."""
    key: tuple[object, ...] | None = None
    if inspect.isfunction(fn) and all(isinstance(a, str) for a in fn.__annotations__.values()):
        # text annotations are resolved in the module's globals, whatever the closure
        key = (fn.__code__, tool_name, fn.__defaults__, *(fn.__kwdefaults__ or {}).items())
        try:
            made = _parameters_made.get(key)
        except TypeError:  # a default that cannot be hashed
            made, key = None, None
        if made is not None:
            return made
    signature = inspect.signature(fn)
    hints = get_type_hints(fn, include_extras=True)
    takes_ctx = False
    fields: dict[str, Any] = {}
    path_params: dict[str, PathRole] = {}
    for index, param in enumerate(signature.parameters.values()):
        annotation = hints.get(param.name, Any)
        if index == 0 and annotation is ToolContext:
            takes_ctx = True
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, default)
        for mark in getattr(annotation, "__metadata__", ()):
            if isinstance(mark, PathParam):
                path_params[param.name] = mark.role
    validator = create_model(  # type: ignore[call-overload]
        f"{tool_name}_input", __config__=ConfigDict(extra="forbid"), **fields
    )
    made = (validator, _clean_schema(validator.model_json_schema()), path_params, takes_ctx)
    if key is not None:
        _parameters_made[key] = made
    return made


@overload
def tool(fn: ToolFunction, /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    stop: bool = False,
    talks_to_user: bool = False,
    watched: bool = True,
) -> Callable[[ToolFunction], Tool]: ...
def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    stop: bool = False,
    talks_to_user: bool = False,
    watched: bool = True,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Decorator: turn a typed function into a `Tool` (`talks_to_user`: see `Tool.talks_to_user`;
    `watched`: `Tool.watched`)."""
    if fn is not None:
        return Tool.from_function(fn)

    def wrap(f: ToolFunction) -> Tool:
        return Tool.from_function(
            f, name=name, description=description, stop=stop, talks_to_user=talks_to_user, watched=watched
        )

    return wrap


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            cast(dict[str, Any], prop).pop("title", None)
    schema.setdefault("properties", {})
    return schema


def _describe(exc: ValidationError) -> str:
    problems: list[str] = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "input"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


def _to_text(value: Any) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


async def run_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Run blocking work (a big file read, a subprocess wait) off the event loop."""
    return await asyncio.to_thread(fn, *args)
