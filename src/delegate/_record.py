"""The record of one subagent, and the status and stop-reason vocabulary of runs and subagents.

One record type (`TaskOutput`) and one serialiser (`to_dict` / `from_dict`) serve every face:
`delegate run --json`, the store, `GET /runs/{id}`, the web page and batch export all carry the
dictionary `to_dict` makes, and `from_dict` reads it back validated (a stored record resumes as
the same object). The `Literal`s here are the only definition of the words a status or a stop
reason may be; `docs/subagents.md` explains each.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from pydantic import AwareDatetime, BaseModel, TypeAdapter, ValidationError

from ._empty import empty_list
from ._errors import UserError
from ._time import iso
from ._usage import Usage

EndStatus = Literal["completed", "aborted", "error", "timed_out", "cancelled"]
"""How an agent (the lead or a subagent) ended."""

Status = Literal["running", "waiting", "completed", "aborted", "error", "timed_out", "cancelled", "interrupted"]
"""The status of a run or of a subagent: `running` until it ends (an `EndStatus`), or
`interrupted` when the process running it died first. A run is `running` while its process holds
the run's lease and `interrupted` once that process is gone (read so at once on its own machine,
after `RUN_LEASE_TTL` elsewhere): it can be resumed. A live run with calls that wait for a
person's decision reads `waiting` (see docs/approvals.md). The others are final."""

LIVE_STATUSES: frozenset[Status] = frozenset({"running", "waiting"})
"""The statuses of a run whose process holds it: it has not ended, and cannot be resumed."""

StopReason = Literal[
    "final_answer",
    "stop_tool",
    "max_steps",
    "token_budget",
    "cost_budget",
    "no_progress",
    "repeated_failure",
    "run_token_budget",
    "run_max_requests",
    "run_cost_budget",
    "timeout",
    "run_timeout",
    "cancelled",
    "model_error",
    "invalid_result",
    "crash",
    "interrupted",
    "refused",
    "stopped",
    "stalled",
]
"""Why an agent stopped: its answer (`final_answer`; a subagent's `complete`, `stop_tool`), one of
its own limits (`max_steps`, `token_budget`, `timeout`), the loop guard (`no_progress`: turns in
a row that did nothing new; `repeated_failure`: the same call failing again and again; see
`delegate/loop/_guard.py`), a run-wide budget (`run_token_budget`,
`run_max_requests`, `run_cost_budget`), the run's deadline passing while a subagent ran (`run_timeout`), `cancelled`,
a `SubagentStart` hook that refused the delegation (`refused`), a model that failed
(`model_error`), a typed result the subagent could not get right (`invalid_result`), a crash of
the subagent (`crash`), its process dying (`interrupted`), or one subagent stopped by its lead
(`task_stop`) or from outside (`delegate runs stop`, the HTTP API, the web page's Stop button):
`stopped`, with status `cancelled`; or a model request that made no progress for the run's
`stall_timeout`, ended by the idle watchdog: `stalled`, with status `timed_out`."""

STATUSES: tuple[Status, ...] = get_args(Status)
END_STATUSES: frozenset[EndStatus] = frozenset(get_args(EndStatus))
"""The final statuses: a run or subagent with one of these has ended for good."""
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)
FsType = Literal["file", "directory", "symlink"]
Isolation = Literal["shared", "overlay", "read-only"]
"""Where a subagent writes: the workspace itself (`shared`), a private layer merged when it
completes (`overlay`), or a layer where every write is refused (`read-only`: a type without write
tools; see `docs/isolation.md`)."""
ChangeOp = Literal["create", "modify", "delete"]


@dataclass(kw_only=True, slots=True)
class Artifact:
    """A delivered file: its absolute path in the shared workspace, and what it is. A symlink is
    reported as itself (spec 000's `fsType: symlink`): its own path, size and time, and `target`,
    the workspace-relative path it leads to (None for anything else)."""

    path: str
    size: int
    fs_type: FsType
    modified_at: str | None = None
    relative_path: str = ""
    target: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The artifact as JSON data; `target` only for a link, so a file's artifact reads the same
        as before links were reported (a stored batch export compares equal)."""
        data: dict[str, Any] = {
            "path": self.path,
            "relative_path": self.relative_path,
            "size": self.size,
            "fs_type": self.fs_type,
            "modified_at": self.modified_at,
        }
        if self.target is not None:
            data["target"] = self.target
        return data


@dataclass(kw_only=True, slots=True)
class Skipped:
    """A path the subagent claimed in `complete` that did not validate, and why."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason}


@dataclass(kw_only=True, slots=True)
class Change:
    """A path an overlay subagent changed: `op` on the workspace, `bytes` of its new version (0 for
    a delete), and `diff`, a unified diff of a text file's lines (capped; None for other files)."""

    path: str
    op: ChangeOp
    bytes: int = 0
    diff: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "op": self.op, "bytes": self.bytes, "diff": self.diff}


@dataclass(kw_only=True, slots=True)
class Conflict:
    """A change of an overlay subagent that was not applied, and why (the workspace changed that
    path since the subagent first saw it; or its type is read-only)."""

    path: str
    reason: str
    version: str | None = None
    """Where the lead can read the subagent's version (a workspace path), when it is a file."""

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "version": self.version}


@dataclass(kw_only=True)
class TaskOutput:
    """What one subagent did and gave back. `result` is its typed result (a type with an
    `output_schema`), else None. `result_file` is the workspace file holding the whole result when
    it was too long for the lead to read (it is also the first artifact). `seq` is its place among
    the run's subagents, in the order the lead called them (not in the order they finished).
    `background` says the lead started it with `run_in_background` (it went on working meanwhile);
    `messages` is how many follow-ups (`task_message`) it took after its first task. `depth` is
    its level below the lead (1: the lead started it; 2: a subagent did, its `parent_agent_id`);
    its `usage` is its own model requests', its subagents' being in their own records."""

    id: str
    type: str
    description: str
    tool_call_id: str | None
    parent_agent_id: str | None
    status: Status
    stop_reason: StopReason | None
    summary: str
    artifacts: list[Artifact] = field(default_factory=empty_list)
    skipped: list[Skipped] = field(default_factory=empty_list)
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    started_at: AwareDatetime | None = None
    completed_at: AwareDatetime | None = None
    """Times with a timezone: a naive one is refused when the record is read back (`_time.py`)."""
    acceptance: list[dict[str, Any]] | None = None
    error: str | None = None
    model: str = ""
    pricing: str | None = None
    """Which price its requests were charged at (`genai-prices:openai`, `usd-per-million:0.4/1.6/0.1`;
    None: its model has none, and its cost is unknown)."""
    result: Any = None
    result_file: str | None = None
    background: bool = False
    messages: int = 0
    seq: int = 0
    depth: int = 1
    isolation: Isolation = "shared"
    changes: list[Change] = field(default_factory=empty_list)
    """What an overlay subagent changed: applied to the workspace when it merged, else kept in its layer."""
    conflicts: list[Conflict] = field(default_factory=empty_list)
    layer: str | None = None
    """The workspace-relative folder of its kept layer (a conflict, a failure), None when none is kept:
    its version of a path `p` is `<layer>/upper/p`."""

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.completed_at is None:
            return None
        return (self.completed_at - self.started_at).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON: `subagents[]` of `delegate run --json` and `GET /runs/{id}`, and
        what the store keeps."""
        return {
            "id": self.id,
            "type": self.type,
            "description": self.description,
            "tool_call_id": self.tool_call_id,
            "parent_agent_id": self.parent_agent_id,
            "depth": self.depth,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "summary": self.summary,
            "result": self.result,
            "result_file": self.result_file,
            "steps": self.steps,
            "usage": self.usage.to_dict(),
            "artifacts": [a.to_dict() for a in self.artifacts],
            "skipped": [s.to_dict() for s in self.skipped],
            "acceptance": self.acceptance,
            "error": self.error,
            "model": self.model,
            "pricing": self.pricing,
            "started_at": iso(self.started_at),
            "completed_at": iso(self.completed_at),
            "background": self.background,
            "messages": self.messages,
            "isolation": self.isolation,
            "changes": [c.to_dict() for c in self.changes],
            "conflicts": [c.to_dict() for c in self.conflicts],
            "layer": self.layer,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, seq: int = 0) -> TaskOutput:
        """A record from `to_dict`'s shape, validated; `ValueError` says what does not fit."""
        try:
            return _record().validate_python({**data, "seq": seq})
        except ValidationError as exc:
            raise ValueError(f"not a subagent record ({exc})") from None


@functools.cache
def _record() -> TypeAdapter[TaskOutput]:
    return TypeAdapter(TaskOutput)


class ResultSchema:
    """A type's `output_schema` (a JSON Schema or a pydantic model), checked once when built.

    `check` validates a value and gives it back as JSON data, with the problems found.
    """

    def __init__(self, spec: dict[str, Any] | type[BaseModel], owner: str) -> None:
        """`owner` names the agent in errors (`subagent type 'pricer'`, `the lead`)."""
        self.model: type[BaseModel] | None = None
        if isinstance(spec, type):
            self.model = spec
            self.schema: dict[str, Any] = spec.model_json_schema()
            return
        if not isinstance(spec, dict):  # pyright: ignore[reportUnnecessaryIsInstance] - front matter is untyped
            raise UserError(f"{owner}: output_schema must be a JSON Schema object or a pydantic model")
        from jsonschema import SchemaError, validators

        cls = validators.validator_for(spec)
        try:
            cls.check_schema(spec)
        except SchemaError as exc:
            problem = exc.message
            raise UserError(f"{owner}: output_schema is not a valid JSON Schema: {problem}") from None
        self.schema = spec
        self._validator = cls(spec)

    def check(self, value: object) -> tuple[Any, list[str]]:
        if self.model is not None:
            try:
                return self.model.model_validate(value).model_dump(mode="json"), []
            except ValidationError as exc:
                return None, [
                    f"result{''.join(f'[{p!r}]' for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)
                ]
        errors = sorted(self._validator.iter_errors(cast(Any, value)), key=lambda e: [str(p) for p in e.absolute_path])
        return value, [f"result{''.join(f'[{p!r}]' for p in e.absolute_path)}: {e.message}" for e in errors]

    def parameter(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The schema as the `result` parameter, and the `$defs` it refers to (hoisted to the top,
        where `#/$defs/...` references resolve within the tool's parameters)."""
        schema = dict(self.schema)
        defs = cast(dict[str, Any], schema.pop("$defs", {}))
        schema.pop("$schema", None)
        return schema, defs


Decision = Literal["approve", "deny"]
DECISIONS: tuple[Decision, ...] = ("approve", "deny")


@dataclass(kw_only=True, slots=True)
class ApprovalRow:
    """One call that waited (or waits) for a person: who made it, what it is, and the decision
    (None while it waits)."""

    run_id: str
    call_id: str
    agent_id: str
    parent_agent_id: str | None = None
    subagent_type: str | None = None
    description: str | None = None
    tool: str
    arguments: dict[str, Any]
    rule: str | None = None
    requested_at: AwareDatetime
    decision: Decision | None = None
    reason: str | None = None
    decided_at: AwareDatetime | None = None
    always: bool = False
    """Whether the person approved every later call of its rule in this run too: only the explicit
    option says so (`always=True`, `--always`, `"always": true`), never the words of a reason."""

    def pending(self) -> dict[str, Any]:
        """An entry of `pending_approvals` (`delegate runs show --json`, `GET /runs/{id}`)."""
        return {
            "call_id": self.call_id,
            "agent_id": self.agent_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "requested_at": iso(self.requested_at),
            "parent_agent_id": self.parent_agent_id,
            "subagent_type": self.subagent_type,
            "description": self.description,
            "rule": self.rule,
        }

    def to_dict(self) -> dict[str, Any]:
        """An entry of `GET /runs/{id}/approvals`: the call, and its decision (None while it waits)."""
        return {
            "call_id": self.call_id,
            "agent_id": self.agent_id,
            "parent_agent_id": self.parent_agent_id,
            "subagent_type": self.subagent_type,
            "description": self.description,
            "tool": self.tool,
            "arguments": self.arguments,
            "rule": self.rule,
            "requested_at": iso(self.requested_at),
            "decision": self.decision,
            "reason": self.reason,
            "decided_at": iso(self.decided_at),
            "always": self.always,
        }
