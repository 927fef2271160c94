"""The store's rows as Python values: users, runs and checkpoints as dataclasses, and the codecs
between them (and events and subagent records) and the columns, validating everything read back."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar, get_type_hints

import orjson
import sqlalchemy as sa
from pydantic import AwareDatetime, Json, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, from_json, to_json

from .._empty import empty_list
from .._errors import StoreError
from .._events import Event, EventType
from .._lease import RUN_LEASE_TTL, owner_alive
from .._record import LIVE_STATUSES, STATUSES, Status, TaskOutput
from .._text import safe_json, safe_text
from .._time import iso, utc_now
from .._usage import Usage
from ._schema import SYSTEM, system_key

_T = TypeVar("_T")


@dataclass(kw_only=True, slots=True)
class UserRow:
    """A user of the HTTP API, as stored (without its token, of which only a hash is kept)."""

    id: str
    name: str
    created_at: AwareDatetime
    token_created_at: AwareDatetime | None = None
    revoked_at: AwareDatetime | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


@dataclass(kw_only=True, slots=True)
class RunRow:
    """A run of the lead agent, as stored."""

    id: str
    user_id: str | None
    prompt: str
    model: str
    status: Status
    final: str | None = None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    workspace: str | None = None
    """The absolute path of the folder the run works in, on `workspace_host`."""
    workspace_host: str | None = None
    """The host the run works on (None: a run stored before homes were kept)."""
    workspace_id: str | None = None
    """The id of the folder it works in (`delegate.workspace.Home`): a process goes on with the run
    only in a folder of that id (None: a run stored before, resumed only at the same path)."""
    created_at: AwareDatetime
    completed_at: AwareDatetime | None = None
    event_count: int = 0
    owner: str | None = None
    """The process holding the run's lease (`host|pid|token`), while it runs."""
    heartbeat_at: AwareDatetime | None = None
    cancel_requested: bool = False
    """Another process asked for the run to be cancelled; its owner does so at its next beat."""
    stop_reason: str | None = None
    steps: int = 0
    uploaded_files: list[dict[str, Any]] | None = None
    """The files uploaded earlier in the conversation the run was started with (None: it offers no
    `list_uploaded_files`), given back to it when it resumes."""
    limits: dict[str, Any] | None = None
    """The limits the run was started with (`RunLimits.to_dict`), kept for its resume (None: a run
    stored before they were kept, with no budget of its own)."""
    gates: dict[str, Any] | None = None
    """The rules that can stop a call of the run (`Gates.stored`), kept for its resume and read
    back checked there (None: a run stored before they were kept)."""
    warnings: list[str] = field(default_factory=empty_list)
    """What was wrong as the run started (an MCP server that did not start, a definition file
    skipped): the `warnings` of `runs show --json`."""
    waiting: int = 0
    """How many of its calls wait for a person's decision: a live run with some reads `waiting`."""
    result: Any = None
    """The lead's typed result as JSON data (its definition has an `output_schema`), once it ended
    with one: the `result` of `runs show --json`."""
    thread_id: str | None = None
    """The thread the run belongs to: the id of its first run (its own id when it continues none)."""
    previous_run_id: str | None = None
    """The run this one continues (None: it starts its thread)."""
    workflow: dict[str, Any] | None = None
    """The workflow the run is (`Workflow.to_dict`: its script, description and args), run again
    from its journal on a resume; None: the run is the lead's."""
    eval: dict[str, Any] | None = None
    """The evaluation attempt the run is (`eval_id`, `arm`, `task`, `attempt`: see docs/eval.md);
    None: an ordinary run."""

    def to_dict(self) -> dict[str, Any]:
        """The run's line of a listing (see `RunSummary.to_dict`); its whole JSON is
        `delegate.run.stored_run`."""
        return summary_dict(self)


SUMMARY_PROMPT_CHARS = 200
"""How much of its prompt a run's summary (a line of `GET /runs`) carries."""


@dataclass(kw_only=True, slots=True)
class RunSummary:
    """A run as a listing shows it: the first `SUMMARY_PROMPT_CHARS` of its prompt, no answer,
    no subagents. Read from the listed columns alone, so listing runs does not read their prompts,
    answers and errors whole."""

    id: str
    status: Status
    prompt: str
    model: str
    usage: Usage
    created_at: AwareDatetime
    completed_at: AwareDatetime | None = None
    owner: str | None = None
    heartbeat_at: AwareDatetime | None = None
    waiting: int = 0
    running_subagents: int = 0
    """How many of its subagents run now: those started and not ended at its recorder's last write
    (0 once the run is not live: a run whose process died may have left a count, which means nothing)."""
    thread_id: str | None = None
    previous_run_id: str | None = None
    subagent_count: int | None = None
    """How many subagents the run ran to their end (None: not counted by this read; listings count
    them); those running now are `running_subagents`."""
    failed_subagents: int | None = None
    """How many of them ended other than `completed` (None: not counted)."""

    def to_dict(self) -> dict[str, Any]:
        """A line of `delegate runs list --json` and of `GET /runs`: the keys of the run's whole
        JSON that a listing has, in the same order (`run_id`, `status`, `usage`, `thread_id`,
        `previous_run_id`, `prompt`, `model`, `created_at`, `completed_at`), then `subagent_count`,
        `failed_subagents` and `running_subagents` when this read counted them."""
        found = summary_dict(self)
        if self.subagent_count is not None:
            found |= {
                "subagent_count": self.subagent_count,
                "failed_subagents": self.failed_subagents,
                "running_subagents": self.running_subagents,
            }
        return found


def summary_dict(run: RunRow | RunSummary) -> dict[str, Any]:
    head = {"run_id": run.id, "status": run.status, "usage": run.usage.to_dict()}
    return head | thread_fields(run) | stored_fields(run) | {"prompt": run.prompt[:SUMMARY_PROMPT_CHARS]}


def thread_fields(run: RunRow | RunSummary) -> dict[str, Any]:
    """Where a run is in its thread: `thread_id` (a run stored before threads: its own id) and
    `previous_run_id`, the run it continues."""
    return {"thread_id": run.thread_id or run.id, "previous_run_id": run.previous_run_id}


def stored_fields(run: RunRow | RunSummary) -> dict[str, Any]:
    """What the store knows of a run beyond what the run gave back (`RunResult.to_dict`)."""
    return {
        "prompt": run.prompt,
        "model": run.model,
        "created_at": iso(run.created_at),
        "completed_at": iso(run.completed_at),
    }


@dataclass(kw_only=True, slots=True)
class Checkpoint:
    """One thing a run did, kept so that resuming it does not do it again.

    `kind` is `answer` (a model answer of the lead, `key` its step), `tool` (a tool result of the
    lead, `key` its tool call id) or `subagent` (a finished subagent's record, `key` the lead's
    tool call id and the prompt's index), among others. `data` is a JSON object.
    """

    run_id: str
    kind: str
    key: str
    data: dict[str, Any]


class KeptConversation(Protocol):
    """A completed subagent's conversation as the store keeps it in the subagent's row (see
    `_schema._conversation_column`): its system prompt (kept once a run), its messages (turned
    into JSON by the writer) and the follow-ups it took."""

    @property
    def system(self) -> str: ...
    @property
    def messages(self) -> Sequence[Any]: ...
    @property
    def follow_ups(self) -> Sequence[str]: ...


_user_row: TypeAdapter[UserRow] = TypeAdapter(UserRow)
_run_row: TypeAdapter[RunRow] = TypeAdapter(RunRow)
SUMMARY_COLUMNS = tuple(f.name for f in fields(RunSummary) if f.name not in ("subagent_count", "failed_subagents"))
"""The columns of a run a listing reads, in the order of `RunSummary`'s fields."""
_summary_types = get_type_hints(RunSummary)
_summary_rows: TypeAdapter[list[tuple[Any, ...]]] = TypeAdapter(
    list[tuple[tuple(Json[_summary_types[c]] if c == "usage" else _summary_types[c] for c in SUMMARY_COLUMNS)]]  # type: ignore[misc]
)
"""Rows of `SUMMARY_COLUMNS` (`usage` is JSON text), as the database gives them."""
_event_type: TypeAdapter[EventType] = TypeAdapter(EventType)
_event_data: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
usage_adapter: TypeAdapter[Usage] = TypeAdapter(Usage)
_PackedEvent = tuple[EventType, float, str, str | None, str | None, dict[str, Any]]
_packed_events: TypeAdapter[list[_PackedEvent]] = TypeAdapter(list[_PackedEvent])

# ---------------------------------------------------------------------------------------------
# Values in and out


def json_text(value: Any) -> str:
    """JSON text of `value`, its strings made valid UTF-8 first if they need it (see `_text.py`).

    `orjson` writes it where it can: the same bytes as pydantic-core's `to_json` for everything
    the store keeps (dicts, lists, tuples, dataclasses such as a conversation's messages, dates
    with `Z` for UTC, enums, UUIDs), in a third to a half of the time (the writer encodes a
    subagent's events, record and conversation: `bench/bench_store_cost.py`). Dataclasses go to
    `_not_native`, which gives orjson the dict it would write of them (`_dataclass_fields`):
    orjson's own way with a slotted dataclass, as every message and part is, takes ten times its
    way with a dict (a subagent's kept conversation, six such objects: 20 -> 9 µs, the least of
    15 on a loaded host). A value it does not take (a type it does not know, which `to_json`
    writes with `str`; a lone surrogate; an integer past 64 bits; a key that is not text) goes
    the way it went before, through `to_json`."""
    try:
        return orjson.dumps(value, default=_not_native, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        pass
    try:
        return to_json(value, fallback=str).decode()
    except PydanticSerializationError:
        return to_json(safe_json(value), fallback=str).decode()


_ORJSON_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_PASSTHROUGH_DATACLASS

_AS_DICT: dict[type, Callable[[Any], dict[str, Any]]] = {}
"""How each slotted dataclass met so far is written (see `_dataclass_fields`)."""


def _not_native(value: object) -> object:
    as_dict = _AS_DICT.get(type(value))
    if as_dict is not None:
        return as_dict(value)
    if is_dataclass(value) and not isinstance(value, type):
        return _dataclass_fields(value)
    raise TypeError(type(value).__name__)  # orjson raises JSONEncodeError: `json_text` asks `to_json`


def _dataclass_fields(value: Any) -> dict[str, Any]:
    """A dataclass instance as orjson writes one: its `__dict__` when it has one, else its fields
    in their order; either way without the names that start with `_`. A slotted one's class gets
    a function of its own, kept in `_AS_DICT`: a dict display of its fields, made once as
    `dataclasses` makes `__init__` (twice as fast as reading the fields by name in a loop)."""
    own: dict[str, Any] | None = getattr(value, "__dict__", None)
    if own is not None:
        return {name: v for name, v in own.items() if not name.startswith("_")}
    names = [f.name for f in fields(value) if not f.name.startswith("_")]  # identifiers: safe to spell out
    as_dict = _AS_DICT[type(value)] = eval(f"lambda o: {{{', '.join(f'{n!r}: o.{n}' for n in names)}}}")
    return as_dict(value)


def record_json(record: TaskOutput) -> str:
    """A subagent's record as one JSON text: its `to_dict`, the object `runs show --json` lists in
    `subagents` (how a batch item keeps the record of its attempt; `TaskOutput.from_dict` reads it)."""
    return json_text(record.to_dict())


EVENTS_PER_ROW = 64
"""The most events one `events` row holds (see `_schema._event_pack_column`)."""

EVENT_COLUMNS = ("run_id", "n", "type", "ts", "agent_id", "parent_agent_id", "tool_call_id", "data", "seq")
"""The columns of an `events` row as `event_rows` gives it (`seq` set by `_db.insert_events`)."""


def event_rows(events: Sequence[Event]) -> list[list[Any]]:
    """`events` as rows of `EVENT_COLUMNS`, in order: each stretch of consecutive events of one run
    packed up to `EVENTS_PER_ROW` to a row (one JSON text for them all); `seq` is set when they are
    numbered."""
    rows: list[list[Any]] = []
    start, count = 0, len(events)
    while start < count:
        run_id = events[start].run_id
        end = start + 1
        while end < count and end - start < EVENTS_PER_ROW and events[end].run_id == run_id:
            end += 1
        rows.append(_event_row(events[start:end]))
        start = end
    return rows


def _event_row(events: Sequence[Event]) -> list[Any]:
    last = events[-1]
    if len(events) == 1:
        data = json_text(last.data)
    else:
        data = json_text([(e.type, e.ts, e.agent_id, e.parent_agent_id, e.tool_call_id, e.data) for e in events])
    parent, call = last.parent_agent_id, last.tool_call_id
    return [
        last.run_id,
        len(events),
        last.type,
        last.ts,
        safe_text(last.agent_id),
        None if parent is None else safe_text(parent),
        None if call is None else safe_text(call),
        data,
        None,
    ]


CHECKPOINT_COLUMNS = ("run_id", "kind", "key", "data")
"""The columns of a `checkpoints` row as `checkpoint_values` and `system_rows` give it."""


def checkpoint_values(checkpoint: Checkpoint) -> tuple[Any, ...]:
    return (checkpoint.run_id, checkpoint.kind, safe_text(checkpoint.key), json_text(checkpoint.data))


def run_values(run: RunRow) -> dict[str, Any]:
    values = asdict(run)
    values["usage"] = usage_adapter.dump_json(run.usage).decode()
    values["created_at"] = iso(run.created_at)
    values["completed_at"] = None if run.completed_at is None else iso(run.completed_at)
    values["heartbeat_at"] = None if run.heartbeat_at is None else iso(run.heartbeat_at)
    values["cancel_requested"] = int(run.cancel_requested)
    values["uploaded_files"] = None if run.uploaded_files is None else json_text(run.uploaded_files)
    values["warnings"] = json_text([safe_text(w) for w in run.warnings]) if run.warnings else None
    values["result"] = None if run.result is None else json_text(run.result)
    values["limits"] = None if run.limits is None else json_text(run.limits)
    values["workflow"] = None if run.workflow is None else json_text(run.workflow)
    values["eval"] = None if run.eval is None else json_text(run.eval)
    values["gates"] = None if run.gates is None else json_text(run.gates)
    return values


_SUBAGENT_JSON = ("usage", "artifacts", "skipped", "acceptance", "result", "changes", "conflicts")

SUBAGENT_COLUMNS = (
    "id",
    "run_id",
    "parent_agent_id",
    "type",
    "description",
    "tool_call_id",
    "status",
    "stop_reason",
    "steps",
    "usage",
    "summary",
    "artifacts",
    "skipped",
    "acceptance",
    "error",
    "started_at",
    "completed_at",
    "model",
    "result",
    "result_file",
    "seq",
    "key",
    "background",
    "messages",
    "isolation",
    "changes",
    "conflicts",
    "layer",
    "conversation",
    "pricing",
    "depth",
)
"""The columns of a `subagents` row as `subagent_values` gives it (all of the table's)."""


def subagent_values(
    run_id: str, record: TaskOutput, key: str | None = None, conversation: KeptConversation | None = None
) -> tuple[Any, ...]:
    """One `subagents` row, in the order of `SUBAGENT_COLUMNS`: the values of the record's
    `to_dict`, its nested ones as JSON text (read from its fields: this runs once a subagent, on
    the recorder's thread, a tuple rather than a dict of 29 keys), its `key` when it is kept for a
    resume, and its `conversation` when it completed (its system prompt by key: `system_rows`
    keeps the prompt)."""
    if record.status not in STATUSES:
        raise StoreError(f"invalid subagent record {record.id!r}: unknown status {record.status!r}")
    if record.started_at is None:
        raise StoreError(f"invalid subagent record {record.id!r}: it has no started_at")
    return (
        f"{run_id}/{record.id}",
        run_id,
        record.parent_agent_id,
        safe_text(record.type),
        safe_text(record.description),
        record.tool_call_id,
        record.status,
        record.stop_reason,
        record.steps,
        json_text(record.usage.to_dict()),
        safe_text(record.summary),
        json_text([a.to_dict() for a in record.artifacts]) if record.artifacts else "[]",
        json_text([s.to_dict() for s in record.skipped]) if record.skipped else "[]",
        "null" if record.acceptance is None else json_text(record.acceptance),
        None if record.error is None else safe_text(record.error),
        iso(record.started_at),
        None if record.completed_at is None else iso(record.completed_at),
        safe_text(record.model),
        "null" if record.result is None else json_text(record.result),
        record.result_file,
        record.seq,
        None if key is None else safe_text(key),
        int(record.background),
        record.messages,
        record.isolation,
        json_text([c.to_dict() for c in record.changes]) if record.changes else None,
        json_text([c.to_dict() for c in record.conflicts]) if record.conflicts else None,
        record.layer,
        None
        if conversation is None
        else json_text(
            {
                "system": system_key(conversation.system),
                "follow_ups": conversation.follow_ups,
                "messages": conversation.messages,
            }
        ),
        record.pricing,
        record.depth,
    )


def system_rows(run_id: str, conversations: Sequence[KeptConversation | None]) -> list[tuple[Any, ...]]:
    """The `checkpoints` rows (`CHECKPOINT_COLUMNS`) that keep the system prompts of
    `conversations` (of one run), each once."""
    systems = {c.system for c in conversations if c is not None}
    return [(run_id, SYSTEM, system_key(s), json_text({"system": s})) for s in systems]


def kept_systems(checkpoints: Iterable[Checkpoint]) -> dict[str, str]:
    """The system prompts kept among a run's `checkpoints`, by key."""
    return {c.key: str(c.data.get("system", "")) for c in checkpoints if c.kind == SYSTEM}


def conversation_checkpoint(run_id: str, row: sa.RowMapping, systems: Mapping[str, str]) -> Checkpoint | None:
    """The conversation a subagent's row keeps (None: none, or its system prompt is not kept), as
    the checkpoint a resumed run reads (`StoredJournal.load`): kind `conversation`, key
    `{agent_id}#{messages}`, data `agent_id`, `messages` (its follow-ups so far), `type`,
    `system` (the text), `key`, `follow_ups` and `conversation` (its messages as JSON data)."""
    if row["conversation"] is None:
        return None
    agent_id = str(row["id"]).removeprefix(f"{run_id}/")
    try:
        kept: dict[str, Any] = from_json(row["conversation"])
    except ValueError as exc:
        raise StoreError(
            f"subagents row {row['id']!r} column 'conversation' holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None
    system = systems.get(str(kept.get("system")))
    if system is None:
        return None
    data: dict[str, Any] = {
        "agent_id": agent_id,
        "messages": row["messages"],
        "type": row["type"],
        "system": system,
        "key": row["key"],
        "follow_ups": kept.get("follow_ups") or [],
        "conversation": kept.get("messages") or [],
    }
    return Checkpoint(run_id=run_id, kind="conversation", key=f"{agent_id}#{row['messages']}", data=data)


def _decode(adapter: TypeAdapter[_T], row: Mapping[Any, Any], table: str, json_columns: tuple[str, ...]) -> _T:
    """Validate one stored row into its dataclass, or raise StoreError saying where it is damaged."""
    values: dict[str, Any] = {str(key): value for key, value in row.items()}
    column = ""
    try:
        for column in json_columns:
            values[column] = from_json(values[column])
        column = ""
        return adapter.validate_python(values)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError too
        where = f" column {column!r}" if column else ""
        raise StoreError(
            f"{table} row {values.get('id')!r}{where} holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def decode_user(row: sa.RowMapping) -> UserRow:
    return _decode(_user_row, {k: v for k, v in row.items() if k != "token_hash"}, "users", ())


def decode_run(row: sa.RowMapping, seen: dict[str, bool] | None = None) -> RunRow:
    """A stored run; one stored `running` whose owner is gone reads `interrupted` (`seen`: what
    was found of each owner so far in this listing, see `owner_alive`)."""
    values = {**row, "warnings": row["warnings"] or "[]"}
    optional = ("uploaded_files", "result", "limits", "workflow", "eval", "gates")
    optional = tuple(c for c in optional if row[c] is not None)
    json_columns = ("usage", "warnings", *optional)
    run = _decode(_run_row, values, "runs", json_columns)
    run.status = live_status(run, utc_now(), seen)
    return run


def live_status(run: RunRow | RunSummary, now: datetime, seen: dict[str, bool] | None) -> Status:
    """What a run reads: one stored `running` whose owner is gone is `interrupted`; one whose
    owner lives and that has calls waiting for a person is `waiting`."""
    if run.status != "running":
        return run.status
    if not owner_alive(run.owner, run.heartbeat_at, now, RUN_LEASE_TTL, seen):
        return "interrupted"  # stored `running`; its owner is gone
    return "waiting" if run.waiting else "running"


def decode_run_summaries(rows: Sequence[Sequence[Any]]) -> list[RunSummary]:
    """Runs' summaries from rows of `SUMMARY_COLUMNS`, validated in one call for all of them (a
    listing reads many rows; one call a row cost twice as much); one stored `running` whose owner
    is gone reads `interrupted`, as in `decode_run`."""
    try:
        valid = _summary_rows.validate_python(rows)
    except ValidationError as exc:
        row, column = exc.errors()[0]["loc"][:2]
        raise StoreError(
            f"runs row {rows[int(row)][0]!r} column {SUMMARY_COLUMNS[int(column)]!r} holds data delegate cannot "
            f"read ({exc}); it was changed outside delegate or by another version"
        ) from None
    now = utc_now()
    seen: dict[str, bool] = {}
    runs = [RunSummary(**dict(zip(SUMMARY_COLUMNS, values, strict=True))) for values in valid]
    for run in runs:
        run.status = live_status(run, now, seen)
        if run.status not in LIVE_STATUSES:
            run.running_subagents = 0  # what a dead process left says nothing
    return runs


def decode_checkpoint(row: sa.RowMapping) -> Checkpoint:
    try:
        return Checkpoint(run_id=row["run_id"], kind=row["kind"], key=row["key"], data=from_json(row["data"]))
    except ValueError as exc:
        raise StoreError(
            f"checkpoints row {row['id']!r} (run {row['run_id']!r}) holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def decode_subagent(run_id: str, row: sa.RowMapping) -> TaskOutput:
    values: dict[str, Any] = {str(key): value for key, value in row.items() if key != "conversation"}
    column = ""
    try:
        for column in _SUBAGENT_JSON:
            values[column] = None if values[column] is None else from_json(values[column])
        column = ""
        values["id"] = values["id"].removeprefix(f"{run_id}/")
        values["model"] = values["model"] or ""
        values["isolation"] = values.get("isolation") or "shared"  # stored before core.0012_isolation
        values["changes"] = values.get("changes") or []
        values["conflicts"] = values.get("conflicts") or []
        values["depth"] = values.get("depth") or 1
        return TaskOutput.from_dict(values, seq=values.pop("seq") or 0)
    except ValueError as exc:
        where = f" column {column!r}" if column else ""
        raise StoreError(
            f"subagents row {row['id']!r}{where} holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def decode_events(row: sa.RowMapping) -> list[Event]:
    """The events an `events` row holds (see `_schema._event_pack_column`), in order."""
    run_id = row["run_id"]
    try:
        if row["n"] == 1:
            return [
                Event(
                    type=_event_type.validate_python(row["type"]),
                    run_id=run_id,
                    agent_id=row["agent_id"],
                    parent_agent_id=row["parent_agent_id"],
                    tool_call_id=row["tool_call_id"],
                    data=_event_data.validate_json(row["data"]),
                    ts=row["ts"],
                )
            ]
        packed = _packed_events.validate_json(row["data"])
        if len(packed) != row["n"]:
            raise ValueError(f"it holds {len(packed)} events, not {row['n']}")
        return [
            Event(type=kind, ts=ts, run_id=run_id, agent_id=agent, parent_agent_id=parent, tool_call_id=call, data=data)
            for kind, ts, agent, parent, call, data in packed
        ]
    except ValueError as exc:
        raise StoreError(
            f"events row {row['id']!r} (run {row['run_id']!r}, {_numbers(row['seq'], row['n'])}) holds data delegate "
            f"cannot read ({exc}); it was changed outside delegate or by another version"
        ) from None


def _numbers(seq: int, n: int) -> str:
    return f"number {seq}" if n == 1 else f"numbers {seq - n + 1} to {seq}"
