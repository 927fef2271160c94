"""What a batch is, as the CLI, the HTTP API and the tools see it; the limits; input validation.

Status values are `Literal`s here and nowhere else. Every limit a submission is checked against is
a constant here, so the documentation, the validation and the error messages cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast, get_args

from .._config import RunLimits, limits_within
from .._errors import ToolError, UserError
from .._time import iso
from .._usage import Usage
from ..subagents import TaskOutput, parse_criteria

ItemStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
"""An item's status. `succeeded` means the execution finished; its acceptance verdict is separate."""

ITEM_STATUSES: tuple[ItemStatus, ...] = get_args(ItemStatus)
TERMINAL_ITEM_STATUSES: frozenset[ItemStatus] = frozenset({"succeeded", "failed", "cancelled"})

BatchStatus = Literal["running", "paused", "cancelled", "completed", "failed"]
"""A batch's status: `running` (or `paused`) while any item is queued or running; once every item is
terminal, `completed` if none failed, else `failed`; `cancelled` once cancelled."""

TERMINAL_BATCH_STATUSES: frozenset[BatchStatus] = frozenset({"cancelled", "completed", "failed"})

MAX_ITEMS = 100_000
"""The most items one batch may hold."""
MAX_RUNNING_ITEMS = 1_000
"""The highest `max_running_items` accepted (items of one batch running at once)."""
MAX_LIVE_ITEMS = 10_000
"""The highest `max_live_items` accepted (items of one batch claimed by workers at once)."""
DEFAULT_MAX_RUNNING_ITEMS = 3
DEFAULT_MAX_LIVE_ITEMS = 100
"""The default `max_live_items`; raised to `max_running_items` when that is higher."""
MAX_ATTEMPTS_LIMIT = 10
DEFAULT_MAX_ATTEMPTS = 3
"""How many times an item is run when its runs end in error (error, timed_out, aborted)."""
MAX_INTERRUPTIONS = 5
"""How many times an item may lose its worker (a crash, a kill) while running before it fails."""
MAX_KEY_CHARS = 256
MAX_PROMPT_CHARS = 200_000
MAX_TITLE_CHARS = 500
ITEM_FIELDS = frozenset({"key", "prompt", "acceptance_criteria", "limits", "token_budget", "max_requests"})
"""An item's fields in JSON; `token_budget` and `max_requests` beside `limits` are two of its
limits, as items gave them before `limits` took every one."""


def loads_json(text: str | bytes) -> Any:
    """`json.loads`, but an object that names one field more than once comes back as a
    `RepeatedFields` saying which. JSON allows it and Python would keep the last value silently, so
    an item with two `"prompt"` fields would run a prompt its author may not have meant; the item's
    validation (or the caller) refuses it instead."""
    return json.loads(text, object_pairs_hook=_object)


class RepeatedFields(dict[str, Any]):
    """A JSON object that named some field more than once (the last value kept); `repeated` lists
    those fields in the order they first came back."""

    repeated: tuple[str, ...]


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    made = dict(pairs)
    if len(made) == len(pairs):
        return made
    seen: set[str] = set()
    repeated: dict[str, None] = {}  # ordered, each once
    for name, _ in pairs:
        if name in seen:
            repeated[name] = None
        seen.add(name)
    marked = RepeatedFields(made)
    marked.repeated = tuple(repeated)
    return marked


def repeated_fields(value: object) -> tuple[str, ...]:
    """The fields a JSON object read by `loads_json` named more than once (none for anything else)."""
    return value.repeated if isinstance(value, RepeatedFields) else ()


class BatchNotFoundError(UserError):
    """No such batch for this user (a batch of another user is not found either)."""

    def __init__(self, batch_id: str, key: str | None = None) -> None:
        what = f"no item {key!r} in batch {batch_id!r}" if key is not None else f"no batch {batch_id!r}"
        super().__init__(f"{what}: check the id with `delegate batch status` or GET /api/v1/batches")
        self.batch_id = batch_id
        self.key = key


class BatchStateError(UserError):
    """The operation does not apply to the batch or item as it is now (say, resuming a cancelled batch)."""


class BatchValidationError(UserError):
    """A submission was rejected before anything was stored. `problems` lists every reason found."""

    def __init__(self, problems: list[str]) -> None:
        shown = "; ".join(problems[:10])
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        super().__init__(f"batch rejected, nothing was stored: {shown}{more}")
        self.problems = problems


@dataclass(kw_only=True, slots=True, frozen=True)
class ItemInput:
    """One item of a submission: a unique key, the subagent's prompt, and optional acceptance
    criteria and run limits (`RunLimits` fields by name, what its subagent may spend: see
    `Runtime.run_task`; over the batch's own, which they may tighten, never loosen)."""

    key: str
    prompt: str
    acceptance_criteria: list[str] | None = None
    limits: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(kw_only=True, slots=True)
class Batch:
    """A batch and the number of its items in each status."""

    id: str
    user_id: str
    title: str
    subagent_type: str
    status: BatchStatus
    counts: dict[ItemStatus, int]
    total: int
    max_running_items: int
    max_live_items: int
    max_attempts: int
    created_at: datetime
    model: str | None = None
    run_id: str | None = None
    tool_call_id: str | None = None
    finished_at: datetime | None = None
    usage: Usage = field(default_factory=Usage)
    """What its items spent so far, tokens and cost (`Usage.cost_usd`) summed."""

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_BATCH_STATUSES

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of `delegate batch status --json` and `GET /batches/{id}`."""
        return {
            "id": self.id,
            "title": self.title,
            "subagent_type": self.subagent_type,
            "model": self.model,
            "status": self.status,
            "counts": dict(self.counts),
            "total": self.total,
            "usage": self.usage.to_dict(),
            "max_running_items": self.max_running_items,
            "max_live_items": self.max_live_items,
            "max_attempts": self.max_attempts,
            "run_id": self.run_id,
            "tool_call_id": self.tool_call_id,
            "created_at": iso(self.created_at),
            "finished_at": iso(self.finished_at),
        }

    def render(self) -> str:
        """One line for the lead: status and counts, never any item's output."""
        counts = ", ".join(f"{self.counts[s]} {s}" for s in ITEM_STATUSES if self.counts[s])
        return f"Batch {self.id} ({self.title}) is {self.status}: {counts or 'no items'} of {self.total}."


@dataclass(kw_only=True, slots=True)
class BatchItem:
    """One item, and the record of the subagent its last attempt ran.

    `record` is that subagent's `TaskOutput`: the same record, with the same `to_dict`, that a run
    keeps for each of its subagents (`runs show --json`'s `subagents`); None until an attempt ran
    one (an attempt can end without: the runner failed before any subagent started). `summary`,
    `artifacts` and the rest are read from it. `usage` is what every attempt's subagent spent,
    summed (the last one's alone is `record.usage`): None until an attempt ran one. An attempt
    whose worker died while it ran stored no record, so what it spent is in no usage. `outcome` is
    how the last attempt ended (the record's status, unless the item ended otherwise), `error` why
    the item failed or was cancelled. `acceptance` is the verdict, kept apart from `status`.
    """

    batch_id: str
    key: str
    seq: int
    prompt: str
    status: ItemStatus
    attempts: int = 0
    acceptance_criteria: list[str] | None = None
    limits: dict[str, Any] = field(default_factory=dict[str, Any])
    """The run limits its subagent runs under (`RunLimits` fields by name), the batch's and its own."""
    record: TaskOutput | None = None
    usage: Usage | None = None
    outcome: str | None = None
    error: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    next_attempt_at: datetime | None = None

    @property
    def summary(self) -> str | None:
        return None if self.record is None else self.record.summary

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        return [] if self.record is None else [a.to_dict() for a in self.record.artifacts]

    @property
    def skipped(self) -> list[dict[str, Any]]:
        return [] if self.record is None else [s.to_dict() for s in self.record.skipped]

    @property
    def steps(self) -> int | None:
        return None if self.record is None else self.record.steps

    @property
    def acceptance(self) -> list[dict[str, Any]] | None:
        return None if self.record is None else self.record.acceptance

    @property
    def result(self) -> Any:
        return None if self.record is None else self.record.result

    def export_row(self) -> dict[str, Any]:
        """One JSON Lines row of `delegate batch export` and `GET /batches/{id}/results.jsonl`:
        the documented keys, then `record`, the subagent's whole record (`TaskOutput.to_dict`)."""
        usage = self.usage
        return {
            "key": self.key,
            "status": self.status,
            "attempts": self.attempts,
            "summary": self.summary,
            "artifacts": self.artifacts,
            "usage": None if usage is None else usage.to_dict(),
            "acceptance": self.acceptance,
            "result": self.result,
            "error": self.error,
            "outcome": self.outcome,
            "steps": self.steps,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "record": None if self.record is None else self.record.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of `delegate batch items --json` and `GET /batches/{id}/items`."""
        return {
            **self.export_row(),
            "seq": self.seq,
            "prompt": self.prompt,
            "acceptance_criteria": self.acceptance_criteria,
            "limits": self.limits,
            "skipped": self.skipped,
            "next_attempt_at": iso(self.next_attempt_at),
        }


@dataclass(kw_only=True, slots=True)
class Submission:
    """What `submit` did: the batch, and whether it was created now (False: an idempotent resubmission)."""

    batch: Batch
    created: bool


@dataclass(kw_only=True, slots=True, frozen=True)
class BatchSpec:
    """A validated submission, ready to store."""

    title: str
    subagent_type: str
    items: list[ItemInput]
    max_running_items: int
    max_live_items: int
    max_attempts: int
    model: str | None
    limits: dict[str, Any] = field(default_factory=dict[str, Any])
    """The batch's run limits, which every item's are within."""


def validate_submission(
    *,
    title: str | None,
    subagent_type: str,
    items: Iterable[ItemInput | Mapping[str, Any]],
    max_running_items: int | None,
    max_live_items: int | None,
    max_attempts: int | None,
    known_types: Collection[str] | None,
    model: str | None,
    limits: Mapping[str, Any] | None = None,
) -> BatchSpec:
    """Check a submission completely; raise `BatchValidationError` listing every problem found.

    `known_types=None` accepts any subagent type (the caller checks it elsewhere). `limits` are
    the batch's run limits (`RunLimits` fields by name): every item runs under them, and an item's
    own may tighten them, never loosen them (`delegate._config.limits_within`).
    """
    problems: list[str] = []
    batch_limits = _limits(limits or {}, "limits", problems)
    subagent_type = subagent_type.strip()
    if not subagent_type:
        problems.append("subagent_type is empty: name the type of subagent that runs each item")
    elif known_types is not None and subagent_type not in known_types:
        names = ", ".join(sorted(known_types)) or "none"
        problems.append(f"unknown subagent_type {subagent_type!r}; available: {names}")
    parsed = _parse_items(items, problems, batch_limits)
    running = DEFAULT_MAX_RUNNING_ITEMS if max_running_items is None else max_running_items
    live = max(DEFAULT_MAX_LIVE_ITEMS, running) if max_live_items is None else max_live_items
    attempts = DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
    _check_range(problems, "max_running_items", running, MAX_RUNNING_ITEMS)
    _check_range(problems, "max_live_items", live, MAX_LIVE_ITEMS)
    _check_range(problems, "max_attempts", attempts, MAX_ATTEMPTS_LIMIT)
    if _is_int(running) and _is_int(live) and running > live:
        problems.append(f"max_running_items ({running}) must be at most max_live_items ({live})")
    title = (title or "").strip() or f"{len(parsed)} × {subagent_type or 'items'}"
    if len(title) > MAX_TITLE_CHARS:
        problems.append(f"title is {len(title)} characters long; the most is {MAX_TITLE_CHARS}")
    if problems:
        raise BatchValidationError(problems)
    return BatchSpec(
        title=title,
        subagent_type=subagent_type,
        items=parsed,
        max_running_items=running,
        max_live_items=live,
        max_attempts=attempts,
        model=model,
        limits=batch_limits,
    )


def _limits(given: object, where: str, problems: list[str]) -> dict[str, Any]:
    """Run limits given by name, checked as a run's (`RunLimits.given`), or none with the problem noted."""
    if not isinstance(given, Mapping):
        problems.append(f"{where} is {_json_kind(given)}; give an object of run limits by name (cost_budget, ...)")
        return {}
    try:
        return RunLimits.given(cast(Mapping[str, Any], given))
    except UserError as exc:
        problems.append(f"{where}: {exc}")
        return {}


def _parse_items(
    items: Iterable[ItemInput | Mapping[str, Any]], problems: list[str], batch_limits: dict[str, Any]
) -> list[ItemInput]:
    parsed: list[ItemInput] = []
    seen: set[str] = set()
    count = 0
    for index, raw in enumerate(items):
        if index >= MAX_ITEMS:
            problems.append(f"more than {MAX_ITEMS} items: split the work into several batches")
            break
        count += 1
        item = _item(raw, index, problems, seen, batch_limits)
        if item is not None:
            parsed.append(item)
    if not count:
        problems.append("no items: a batch needs at least one item")
    return parsed


def _item(raw: object, index: int, problems: list[str], seen: set[str], batch: dict[str, Any]) -> ItemInput | None:
    """One item from code or from JSON (where anything may turn up), or None with its problems
    noted. Its limits are the `batch`'s, with its own tightening them."""
    if isinstance(raw, ItemInput):
        key, prompt, criteria, limits = raw.key, raw.prompt, raw.acceptance_criteria, raw.limits
    elif isinstance(raw, Mapping):
        raw = cast(Mapping[str, Any], raw)
        unknown = sorted(set(raw) - ITEM_FIELDS)
        if unknown:
            problems.append(f"item {index}: unknown field(s) {', '.join(map(repr, unknown))}")
            return None
        if repeated := repeated_fields(raw):
            twice = ", ".join(map(repr, repeated))
            problems.append(f"item {index}: field(s) {twice} given more than once; give each field once")
            return None
        key, prompt, criteria = raw.get("key"), raw.get("prompt"), raw.get("acceptance_criteria")
        limits = _item_limits(raw, index, problems)
    else:
        problems.append(f"item {index}: expected an object with key and prompt")
        return None
    before = len(problems)
    problems += _key_problems(key, index, seen) + _prompt_problems(prompt, f"item {index} ({key!r})")
    try:  # the same checks as a `task` call's: what `task` refuses, a batch refuses
        checked = parse_criteria(criteria) or None
    except ToolError as exc:
        problems.append(f"item {index}: {exc}")
        checked = None
    own = _limits(limits, f"item {index}: limits", problems)
    if len(problems) > before:
        return None
    assert isinstance(key, str) and isinstance(prompt, str)
    return ItemInput(key=key, prompt=prompt, acceptance_criteria=checked, limits=limits_within(batch, own))


def _item_limits(raw: Mapping[str, Any], index: int, problems: list[str]) -> object:
    """An item's `limits` in JSON, with `token_budget` and `max_requests` given beside them (as
    items gave them before) among them; each named once."""
    limits = raw.get("limits", {})
    beside = {name: raw[name] for name in ("token_budget", "max_requests") if name in raw}
    if not beside:
        return limits
    if not isinstance(limits, Mapping):
        return limits
    twice = sorted(set(beside) & set(cast(Mapping[str, Any], limits)))
    if twice:
        problems.append(f"item {index}: {', '.join(map(repr, twice))} given in limits and beside them; give it once")
    return {**cast(Mapping[str, Any], limits), **beside}


def _key_problems(key: object, index: int, seen: set[str]) -> list[str]:
    """What is wrong with an item's key (none if it is a new, non-empty string; then it is `seen`).
    A number is refused, not read as its string: `7` and `"7"` would be two keys that print alike."""
    if key is not None and not isinstance(key, str):
        shown = json.dumps(key, default=str)[:40]
        return [f"item {index}: key is {_json_kind(key)} ({shown}); a key is a string: write it in quotes"]
    if not isinstance(key, str) or not key.strip():
        return [f"item {index}: empty key; every item needs a non-empty, unique key"]
    if len(key) > MAX_KEY_CHARS:
        return [f"item {index}: key is {len(key)} characters long; the most is {MAX_KEY_CHARS}"]
    if key in seen:
        return [f"item {index}: duplicate key {key!r}; every key must be unique"]
    seen.add(key)
    return []


def _prompt_problems(prompt: object, where: str) -> list[str]:
    if prompt is not None and not isinstance(prompt, str):
        return [f"{where}: prompt is {_json_kind(prompt)}; a prompt is a string"]
    if not isinstance(prompt, str) or not prompt.strip():
        return [f"{where}: empty prompt"]
    if len(prompt) > MAX_PROMPT_CHARS:
        return [f"{where}: prompt longer than {MAX_PROMPT_CHARS} characters"]
    return []


def _json_kind(value: object) -> str:
    """What a JSON value is, as its author wrote it: `a number`, `an array`, ..."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_range(problems: list[str], name: str, value: object, most: int) -> None:
    if not _is_int(value) or not 1 <= value <= most:  # type: ignore[operator]
        problems.append(f"{name} is {value!r}; use a whole number from 1 to {most}")
