"""The store's rows as Python values: users, runs and checkpoints as dataclasses, and the codecs
between them (and events and subagent records) and the columns, validating everything read back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, TypeVar, get_type_hints

import sqlalchemy as sa
from pydantic import AwareDatetime, Json, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, from_json, to_json

from .._errors import StoreError
from .._events import Event, EventType
from .._lease import owner_alive
from .._record import STATUSES, Status, TaskOutput
from .._text import safe_json, safe_text
from .._usage import Usage

RunStatus = Status
"""The status of a run (see `delegate._record.Status`). `running` while its process holds the
run's lease; `interrupted` once that process is gone (read so at once on its own machine, after
`RUN_LEASE_TTL` elsewhere): it can be resumed. The others are final."""

FINAL_STATUSES: frozenset[str] = frozenset({"completed", "error", "cancelled", "aborted", "timed_out"})

RUN_LEASE_TTL = 10.0
"""Seconds a run's owner may go without a heartbeat before its run reads `interrupted`."""
RUN_HEARTBEAT = 1.0
"""How often the owner of a run beats (and looks for a cancellation asked from elsewhere)."""

SubagentStatus = Status
"""A subagent is `running`, then ends like an agent does (completed, aborted, error, ...)."""

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
    status: RunStatus
    final: str | None = None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    workspace: str | None = None
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
    token_budget: int | None = None
    """The run-wide budgets given for this run (`Runtime.run`, `POST /runs`; None: the runtime's),
    kept for its resume."""
    max_requests: int | None = None


SUMMARY_PROMPT_CHARS = 200
"""How much of its prompt a run's summary (a line of `GET /runs`) carries."""


@dataclass(kw_only=True, slots=True)
class RunSummary:
    """A run as a listing shows it: the first `SUMMARY_PROMPT_CHARS` of its prompt, no answer,
    no subagents. Read from the listed columns alone, so listing runs does not read their prompts,
    answers and errors whole."""

    id: str
    status: RunStatus
    prompt: str
    model: str
    usage: Usage
    created_at: AwareDatetime
    completed_at: AwareDatetime | None = None
    owner: str | None = None
    heartbeat_at: AwareDatetime | None = None


@dataclass(kw_only=True, slots=True)
class Checkpoint:
    """One thing a run did, kept so that resuming it does not do it again.

    `kind` is `answer` (a model answer of the lead, `key` its step), `tool` (a tool result of the
    lead, `key` its tool call id) or `subagent` (a finished subagent's record, `key` the lead's
    tool call id and the prompt's index). `data` is a JSON object.
    """

    run_id: str
    kind: str
    key: str
    data: dict[str, Any]


_user_row: TypeAdapter[UserRow] = TypeAdapter(UserRow)
_run_row: TypeAdapter[RunRow] = TypeAdapter(RunRow)
SUMMARY_COLUMNS = tuple(f.name for f in fields(RunSummary))
"""The columns of a run a listing reads, in the order of `RunSummary`'s fields."""
_summary_types = get_type_hints(RunSummary)
_summary_rows: TypeAdapter[list[tuple[Any, ...]]] = TypeAdapter(
    list[tuple[tuple(Json[_summary_types[c]] if c == "usage" else _summary_types[c] for c in SUMMARY_COLUMNS)]]  # type: ignore[misc]
)
"""Rows of `SUMMARY_COLUMNS` (`usage` is JSON text), as the database gives them."""
_event_type: TypeAdapter[EventType] = TypeAdapter(EventType)
_event_data: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
usage_adapter: TypeAdapter[Usage] = TypeAdapter(Usage)
_aware: TypeAdapter[AwareDatetime] = TypeAdapter(AwareDatetime)

# ---------------------------------------------------------------------------------------------
# Values in and out


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError(f"timestamps must be timezone-aware, got {moment!r}")
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _json_text(value: Any) -> str:
    """JSON text of `value`, its strings made valid UTF-8 first if they need it (see `_text.py`)."""
    try:
        return to_json(value, fallback=str).decode()
    except PydanticSerializationError:
        return to_json(safe_json(value), fallback=str).decode()


def event_values(ev: Event) -> dict[str, Any]:
    return {
        "run_id": ev.run_id,
        "type": ev.type,
        "ts": ev.ts,
        "agent_id": safe_text(ev.agent_id),
        "parent_agent_id": ev.parent_agent_id,
        "tool_call_id": None if ev.tool_call_id is None else safe_text(ev.tool_call_id),
        "data": _json_text(ev.data),
    }


def checkpoint_values(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "run_id": checkpoint.run_id,
        "kind": checkpoint.kind,
        "key": safe_text(checkpoint.key),
        "data": _json_text(checkpoint.data),
    }


def run_values(run: RunRow) -> dict[str, Any]:
    values = asdict(run)
    values["usage"] = usage_adapter.dump_json(run.usage).decode()
    values["created_at"] = iso(run.created_at)
    values["completed_at"] = None if run.completed_at is None else iso(run.completed_at)
    values["heartbeat_at"] = None if run.heartbeat_at is None else iso(run.heartbeat_at)
    values["cancel_requested"] = int(run.cancel_requested)
    values["uploaded_files"] = None if run.uploaded_files is None else _json_text(run.uploaded_files)
    return values


_SUBAGENT_JSON = ("usage", "artifacts", "skipped", "acceptance", "result")


def subagent_values(run_id: str, record: TaskOutput) -> dict[str, Any]:
    """One `subagents` row: the record's `to_dict`, its nested values as JSON text."""
    if record.status not in STATUSES:
        raise StoreError(f"invalid subagent record {record.id!r}: unknown status {record.status!r}")
    if record.started_at is None:
        raise StoreError(f"invalid subagent record {record.id!r}: it has no started_at")
    values = record.to_dict()
    values["id"] = f"{run_id}/{record.id}"
    values["run_id"] = run_id
    values["seq"] = record.seq
    for name in _SUBAGENT_JSON:
        values[name] = _json_text(values[name])
    for name in ("description", "summary", "error", "type", "model"):
        if values[name] is not None:
            values[name] = safe_text(values[name])
    values["started_at"] = iso(record.started_at)
    values["completed_at"] = None if record.completed_at is None else iso(record.completed_at)
    return values


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
    run = _decode(_run_row, row, "runs", ("usage",) if row["uploaded_files"] is None else ("usage", "uploaded_files"))
    if run.status == "running" and not owner_alive(run.owner, run.heartbeat_at, utc_now(), RUN_LEASE_TTL, seen):
        run.status = "interrupted"  # stored `running`; its owner is gone
    return run


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
        if run.status == "running" and not owner_alive(run.owner, run.heartbeat_at, now, RUN_LEASE_TTL, seen):
            run.status = "interrupted"
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
    values: dict[str, Any] = {str(key): value for key, value in row.items()}
    column = ""
    try:
        for column in _SUBAGENT_JSON:
            values[column] = None if values[column] is None else from_json(values[column])
        column = ""
        values["id"] = values["id"].removeprefix(f"{run_id}/")
        values["model"] = values["model"] or ""
        for moment in ("started_at", "completed_at"):
            if values[moment] is not None:
                values[moment] = _aware.validate_python(values[moment])
        return TaskOutput.from_dict(values, seq=values.pop("seq") or 0)
    except ValueError as exc:
        where = f" column {column!r}" if column else ""
        raise StoreError(
            f"subagents row {row['id']!r}{where} holds data delegate cannot read ({exc}); "
            "it was changed outside delegate or by another version"
        ) from None


def decode_event(row: sa.RowMapping) -> Event:
    try:
        return Event(
            type=_event_type.validate_python(row["type"]),
            run_id=row["run_id"],
            agent_id=row["agent_id"],
            parent_agent_id=row["parent_agent_id"],
            tool_call_id=row["tool_call_id"],
            data=_event_data.validate_json(row["data"]),
            ts=row["ts"],
        )
    except ValueError as exc:
        raise StoreError(
            f"events row {row['id']!r} (run {row['run_id']!r}, number {row['seq']}) holds data delegate "
            f"cannot read ({exc}); it was changed outside delegate or by another version"
        ) from None
