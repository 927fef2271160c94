"""Runs started by the server: each one an asyncio task, its events kept in memory while it lives.

A client that follows a run's events (SSE) reads them from the `LiveRun` while the run is live in
this process, and from the store otherwise (a finished run, a run of an earlier server process, a
run started by `delegate run` on the same database). Both number events the same way: the store
numbers a run's events 1, 2, 3, ... in the order the runtime emits them, and the live list holds
them in that same order from the first one, so an SSE `id:` means the same in both and
`Last-Event-ID` resumes from either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import to_json

from .._config import CANCEL_WAIT, RunLimits
from .._empty import empty_list
from .._errors import UserError
from .._events import Event
from .._record import LIVE_STATUSES, Status
from .._store import Store
from ..models import LOCAL_FILE_REFUSED, names_a_local_file
from ..run import Runtime, RuntimeFactory, stored_events, stored_run
from ..workflows import Workflow
from ._auth import ApiError, Token, Tokens, UserId, app_store, unknown_token
from ._body import body_schema, json_body
from ._limits import Limits
from ._sse import KEEPALIVE, KEEPALIVE_INTERVAL, MAX_NUMBER, Offset, Page, event_stream, poll, sse, until
from ._state import app_state
from ._threads import continue_thread

_log = logging.getLogger("delegate.server")

POLL_INTERVAL = 0.5
"""How often a follower of a run that is not live here looks for new events in the store."""


@dataclass(eq=False)
class LiveRun:
    """A run executing in this process: its task, and every event it emitted so far, in order."""

    run_id: str
    user_id: str
    loop: asyncio.AbstractEventLoop
    events: list[Event] = field(default_factory=empty_list)
    base: int = 0
    """The number of events stored before this process took the run on (a resumed run's): the
    first event in `events` is number `base + 1`."""
    task: asyncio.Task[None] | None = None
    runtime: Runtime | None = None
    started: asyncio.Event = field(default_factory=asyncio.Event)
    done: bool = False
    _waiters: list[asyncio.Future[None]] = field(default_factory=empty_list)
    _thread: int = field(default_factory=threading.get_ident)

    def emit(self, event: Event) -> None:
        """The event sink given to the runtime: keep the event and wake every follower."""
        if threading.get_ident() != self._thread:  # never expected; keep the list loop-owned anyway
            self.loop.call_soon_threadsafe(self.emit, event)
            return
        self.events.append(event)
        if event.type == "run.started":
            self.started.set()
        self._wake()

    def finish(self) -> None:
        self.done = True
        self.started.set()
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def follow(self, after: int) -> AsyncIterator[tuple[int, Event | None]]:
        """Yield `(seq, event)` for every event numbered above `after`, as they come, until the run
        ends and is stored. `(0, None)` is yielded after `KEEPALIVE_INTERVAL` of silence."""
        seen = max(after, self.base) - self.base
        while True:
            # `run.completed` is emitted just before the runtime stores the run's results: hold it
            # back until the run is done, so a client that sees it can read the final record.
            while seen < len(self.events) and (self.done or self.events[seen].type != "run.completed"):
                seen += 1
                yield self.base + seen, self.events[seen - 1]
            if self.done and seen >= len(self.events):
                return
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, KEEPALIVE_INTERVAL)
            except TimeoutError:
                yield 0, None


class RunManager:
    """Starts runs as tasks of the server's event loop, follows their events, cancels them.

    `build` makes each run's runtime (for its user and model); `ready` raises an `ApiError` unless
    the model a run names (None: the default) is ready. It is the server's `Resumer`: the
    `Takeover` of interrupted runs hands them to it.
    """

    def __init__(
        self,
        store: Store,
        build: RuntimeFactory,
        *,
        limits: Limits | None = None,
        ready: Callable[[str | None], None] | None = None,
    ) -> None:
        self.store = store
        self.build = build
        self.limits = limits or Limits()
        self.ready: Callable[[str | None], None] = ready or _always_ready
        self.live: dict[str, LiveRun] = {}
        self._starting: Counter[str] = Counter()

    async def start(
        self,
        user_id: str,
        prompt: str,
        model: str | None,
        limits: RunLimits,
        uploaded_files: list[dict[str, Any]] | None = None,
        continue_from: str | None = None,
        workflow: Workflow | None = None,
    ) -> str:
        """Start a run in the background (continuing the run `continue_from`, or running a
        `workflow` instead of the lead, when given); return its id once the run is recorded.

        Raises `UserError` for a bad model or setting, before anything is stored, and `ApiError`
        for a prompt past the limit, a user with too many live runs, or a model not ready yet.
        """
        if not prompt.strip() and workflow is None:
            raise UserError("the prompt is empty: say what the agent should do")
        check_prompt(prompt, self.limits.max_prompt_chars, "prompt")
        check_prompt(workflow.script if workflow is not None else "", self.limits.max_prompt_chars, "workflow")
        self.ready(model)
        cap = self.limits.max_live_runs_per_user
        starting = self._starting[user_id]
        running = sum(1 for live in self.live.values() if live.user_id == user_id)
        if starting + running >= cap:
            # Whose cap it is, and what fills it, as counted: the caller's runs live in this server
            # (resumed ones too) and those of its requests still being set up.
            raise ApiError(
                429,
                "too_many_runs",
                f"your runs on this server are at its cap of {cap} per user: {running} running, {starting} "
                "starting; wait for one to end, or cancel one (POST /api/v1/runs/{id}/cancel)",
                retry_after=5,
            )
        self._starting[user_id] += 1  # counted from here, so requests that arrive together are capped too
        try:
            return await self._start(user_id, prompt, model, limits, uploaded_files, continue_from, workflow)
        finally:
            self._starting[user_id] -= 1
            if not self._starting[user_id]:
                del self._starting[user_id]

    async def _start(
        self,
        user_id: str,
        prompt: str,
        model: str | None,
        limits: RunLimits,
        uploaded_files: list[dict[str, Any]] | None,
        continue_from: str | None = None,
        workflow: Workflow | None = None,
    ) -> str:
        if model is not None and names_a_local_file(model):  # a file of the server's: not for a user to name
            raise UserError(LOCAL_FILE_REFUSED)
        # Off the event loop: a runtime reads definition files, and its model may build a client.
        runtime = await asyncio.to_thread(self.build, user_id, model)
        try:
            await asyncio.to_thread(lambda: runtime.model)  # a bad provider or a missing key is bad input
        except BaseException:
            await runtime.aclose()
            raise
        run_id = f"run_{uuid.uuid4().hex[:12]}"
        live = LiveRun(run_id=run_id, user_id=user_id, loop=asyncio.get_running_loop(), runtime=runtime)
        self.live[run_id] = live
        go = runtime.run(
            prompt,
            run_id=run_id,
            sinks=[live.emit],
            uploaded_files=uploaded_files,
            limits=limits,
            continue_from=continue_from,
            workflow=workflow,
        )
        live.task = asyncio.create_task(self._drive(live, runtime, go), name=f"delegate-run-{run_id}")
        # The runtime records the run before its first event; answer only then, so that the id we
        # hand out can be read back at once.
        await live.started.wait()
        if not live.events:  # the runtime refused to start: raise its error here
            await asyncio.wait([live.task])
            live.task.result()
            raise RuntimeError(f"run {run_id} ended before it started")
        return run_id

    async def resume(self, run_id: str, user_id: str) -> None:
        """Continue an interrupted run of `user_id` in this process (see `Runtime.resume`);
        `UserError` if it is not interrupted, or another process took it first."""
        if run_id in self.live:
            raise UserError(f"run {run_id} is already running in this server")
        # Taken here before anything is awaited: a second resume of the same run (two requests at
        # once, or the takeover's) is refused at once instead of replacing this one in `live`,
        # where its end would then drop the winner (a stop of the server would miss it).
        live = LiveRun(run_id=run_id, user_id=user_id, loop=asyncio.get_running_loop())
        self.live[run_id] = live
        try:
            run = await asyncio.to_thread(self.store.get_run, run_id, user_id)
            if run is None:
                raise UserError(f"no run {run_id!r}: list yours with GET /api/v1/runs")
            live.runtime = runtime = await asyncio.to_thread(self.build, user_id, run.model)
        except BaseException:
            self._drop(live)
            raise
        live.base = run.event_count
        go = runtime.resume(run_id, sinks=[live.emit])
        live.task = asyncio.create_task(self._drive(live, runtime, go), name=f"delegate-resume-{run_id}")
        await live.started.wait()
        if not live.events:  # it could not be claimed: raise why
            await asyncio.wait([live.task])
            live.task.result()

    async def _drive(self, live: LiveRun, runtime: Runtime, go: Coroutine[Any, Any, Any]) -> None:
        try:
            await go
        except asyncio.CancelledError:
            pass  # the runtime recorded the run and its subagents as cancelled
        except Exception as exc:
            if not live.events:
                raise  # it never started: `start` raises this to the caller
            _log.exception("run %s crashed", live.run_id)
            shown = runtime.workspace.shown(str(exc))  # the log above has the server's paths; the user, theirs
            await self._record_crash(live, f"{type(exc).__name__}: {shown}")
        finally:
            with contextlib.suppress(Exception):
                await runtime.aclose()
            live.finish()
            self._drop(live)

    def _drop(self, live: LiveRun) -> None:
        """`live` is no longer going here; another `LiveRun` of the same id (a resume that came
        after it ended) stays."""
        if self.live.get(live.run_id) is live:
            del self.live[live.run_id]

    async def _record_crash(self, live: LiveRun, error: str) -> None:
        """A run that crashed outside the agent loop (the store failing, say) still ends, for readers."""
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.store.finish_run, live.run_id, "error", error=error)
        if not any(e.type == "run.completed" for e in live.events):
            live.emit(
                Event(
                    type="run.completed",
                    run_id=live.run_id,
                    agent_id="lead",
                    data={"status": "error", "final": "", "error": error},
                )
            )

    async def cancel(self, run_id: str, user_id: str) -> None:
        """Cancel a run and wait (a little) for it to record that: a live run here at once, a run
        of another process at its owner's next heartbeat, an interrupted one in the store."""
        live = self.live.get(run_id)
        if live is not None and live.task is not None:
            live.task.cancel()
            await asyncio.wait([live.task], timeout=CANCEL_WAIT)
            return
        run = await asyncio.to_thread(self.store.request_cancel, run_id, user_id)
        deadline = asyncio.get_running_loop().time() + CANCEL_WAIT
        while run.status in LIVE_STATUSES and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(POLL_INTERVAL / 5)
            found = await asyncio.to_thread(self.store.get_run, run_id, user_id)
            if found is None:
                return
            run = found

    async def close(self) -> None:
        """Stop every live run, leaving it `interrupted` (what it did so far stored, its lease let
        go: nobody cancelled it), so the next server or worker resumes it; wait for them. A run
        still being set up is cancelled before it starts."""
        tasks = [live.task for live in self.live.values() if live.task is not None]
        for live in self.live.values():
            if live.task is not None and not (live.runtime is not None and live.runtime.interrupt()):
                live.task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT)

    async def follow(self, run_id: str, after: int) -> AsyncIterator[tuple[int, Event | None]]:
        """A run's events numbered above `after`, then new ones as they come, until `run.completed`.

        `(0, None)` marks a stretch of silence (for keep-alive comments).
        """
        live = self.live.get(run_id)
        if live is not None:
            if after < live.base:  # a resumed run: what came before this process, from the store
                for event in await asyncio.to_thread(self.store.events, run_id, after, live.base - after):
                    after += 1
                    yield after, event
            async for item in live.follow(after):
                yield item
            return
        async for item in self._follow_store(run_id, after):
            yield item

    async def _follow_store(self, run_id: str, after: int) -> AsyncIterator[tuple[int, Event | None]]:
        """A run that is not live here (it ended, or another process runs it): poll the store."""
        async for item in poll(stored_events(self.store, run_id, after), interval=POLL_INTERVAL):
            yield item if item is not None else (0, None)


def run_sse(seq: int, event: Event | None) -> bytes:
    """A run's event as a server-sent event (None: a keep-alive comment)."""
    return KEEPALIVE if event is None else sse(seq, event.type, event.to_dict())


def last_event_id(header: str | None, after: int | None) -> int:
    """Where a follower resumes: `?after=N` wins, then the `Last-Event-ID` header, else the start."""
    if after is not None:
        return max(0, after)
    text = (header or "").strip()
    if text.isascii() and text.isdigit() and len(text) < 10:  # `"\xb2".isdigit()` too, which `int` refuses
        return int(text)
    return 0


def run_json(store: Store, run_id: str, user_id: str) -> dict[str, Any] | None:
    """What `GET /runs/{id}` answers, read from the store (so it holds after a restart): the
    stored run's JSON (`stored_run`) and how many events it has."""
    found = stored_run(store, run_id, user_id)
    if found is None:
        return None
    run, data = found
    return data | {"events": run.event_count}


def run_list(
    store: Store, token: str, offset: int, limit: int, query: str | None = None, status: Status | None = None
) -> bytes | None:
    """What `GET /runs` answers (the caller's runs, newest first, without their subagents but with
    how many there were and how many failed), as JSON; None for an unknown token. One store call
    checks the token and reads the runs."""
    runs = store.run_summaries(token, limit=limit, offset=offset, query=query, status=status)
    if runs is None:
        return None
    return to_json({"runs": [run.to_dict() for run in runs], "offset": offset})


# -- routes ---------------------------------------------------------------------------------------


class UploadedFile(BaseModel):
    """One file uploaded earlier in the conversation."""

    model_config = ConfigDict(extra="allow")

    filename: str = Field(min_length=1, description="Its name, as the user uploaded it.")
    path: str | None = Field(default=None, description="Where it is in the workspace.")
    size: int | None = Field(default=None, ge=0, description="Its size in bytes.")
    content_type: str | None = Field(default=None, description="Its media type.")


class RunRequest(BaseModel):
    """The body of `POST /runs`."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(default="", description="What the lead agent should do (with `workflow`: what it is for).")
    workflow: str | None = Field(
        default=None, min_length=1, description="A workflow script to run instead of the lead (docs/workflows.md)."
    )
    args: dict[str, Any] | None = Field(default=None, description="The workflow's `args` (JSON data).")
    model: str | None = Field(default=None, description="provider:name; the server's default if omitted.")
    max_parallel: int | None = Field(default=None, ge=1, le=1000, description="Subagents running at once.")
    max_depth: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Levels of subagents (1: only the lead delegates); at most the server's.",
    )
    uploaded_files: list[UploadedFile] | None = Field(
        default=None, description="Files uploaded earlier in the conversation: offers list_uploaded_files."
    )
    token_budget: int | None = Field(default=None, ge=1, description="Tokens the whole run may spend.")
    max_requests: int | None = Field(default=None, ge=1, description="Model requests the whole run may make.")
    cost_budget: float | None = Field(
        default=None, gt=0, description="US dollars the whole run may spend (priced by genai-prices)."
    )
    approval_timeout: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a call under an `ask` rule waits for a decision before it is denied (default: the "
        "server's --approval-timeout).",
    )
    continue_from: str | None = Field(
        default=None,
        alias="continue",
        min_length=1,
        description="A run of yours to continue: the lead starts from its conversation, in its thread.",
    )

    def limits(self, default: RunLimits) -> RunLimits:
        """The run's limits: the operator's (`default`), with those this request names. A budget,
        `max_parallel` or approval timeout the operator set is a cap: the request may lower it,
        never raise it (a call waiting for a person holds the run's place, its time not counted)."""
        return default.under({name: getattr(self, name) for name in _LIMITS})  # each named as its `RunLimits` field

    @model_validator(mode="after")
    def _prompt_not_empty(self) -> RunRequest:
        if not self.prompt.strip() and self.workflow is None:
            raise ValueError("the prompt is empty: say what the agent should do")
        return self

    def planned(self) -> Workflow | None:
        """The workflow this request runs (None: the lead)."""
        if self.workflow is None:
            return None
        return Workflow(script=self.workflow, description=self.prompt, args=self.args or {})


async def _manager(request: Request) -> RunManager:
    return app_state(request.app).runs


Runs = Annotated[RunManager, Depends(_manager)]
AppStore = Annotated[Store, Depends(app_store)]
router = APIRouter(prefix="/api/v1", tags=["runs"])


@router.post("/runs", status_code=202, openapi_extra=body_schema(RunRequest))
async def start_run(
    body: Annotated[RunRequest, Depends(json_body(RunRequest))], request: Request, user_id: UserId, runs: Runs
) -> JSONResponse:
    """Start a run in the background; follow it with `GET /runs/{id}/events`."""
    uploads = None if body.uploaded_files is None else [f.model_dump(exclude_none=True) for f in body.uploaded_files]
    limits = body.limits(app_state(request.app).run_limits)
    if body.continue_from is not None:
        run_id = await continue_thread(runs, user_id, body.prompt, body.model, limits, uploads, body.continue_from)
    else:
        run_id = await runs.start(user_id, body.prompt, body.model, limits, uploads, workflow=body.planned())
    return JSONResponse({"run_id": run_id, "status": "running"}, 202, headers={"Location": f"/api/v1/runs/{run_id}"})


@router.get("/runs", response_model=dict[str, Any])
async def list_runs(
    token: Token,
    store: AppStore,
    offset: Offset = 0,
    limit: Page = 50,
    q: Annotated[
        str | None, Query(max_length=500, description="Only runs whose prompt holds this text (any case).")
    ] = None,
    status: Annotated[Status | None, Query(description="Only runs in this status.")] = None,
) -> Response:
    """The caller's runs, newest first; `q` and `status` narrow them, `offset` and `limit` page."""
    found = await asyncio.to_thread(run_list, store, token, offset, limit, q or None, status)
    if found is None:
        raise unknown_token()
    return Response(found, media_type="application/json")


@router.get("/me")
async def me(token: Token, store: AppStore) -> dict[str, Any]:
    """The caller: its user name (what the page shows in its header)."""
    name = await asyncio.to_thread(store.user_name_for_token, token)
    if name is None:
        raise unknown_token()
    return {"name": name}


@router.get("/runs/{run_id}")
async def get_run(run_id: str, user_id: UserId, store: AppStore) -> dict[str, Any]:
    """A run: its status, and once it ended its final answer, usage and subagents."""
    found = await asyncio.to_thread(run_json, store, run_id, user_id)
    if found is None:
        raise _no_run(run_id)
    return found


@router.get("/runs/{run_id}/events")
async def run_events(
    run_id: str,
    request: Request,
    user_id: UserId,
    token: Token,
    tokens: Tokens,
    store: AppStore,
    runs: Runs,
    after: Annotated[int | None, Query(ge=0, le=MAX_NUMBER, description="Resume after this event number.")] = None,
) -> StreamingResponse:
    """Server-sent events: the run's stored events, then live ones, until `run.completed`.

    Each event's `id:` is its number in the run, so `Last-Event-ID` (or `?after=`) resumes. If
    the token is revoked or replaced meanwhile, the stream ends with a `token.revoked` event.
    """
    if await asyncio.to_thread(store.get_run, run_id, user_id) is None:
        raise _no_run(run_id)
    start = last_event_id(request.headers.get("last-event-id"), after)

    async def events() -> AsyncIterator[bytes]:
        async for seq, event in runs.follow(run_id, start):
            yield run_sse(seq, event)

    async def stream() -> AsyncIterator[bytes]:
        with tokens.hold(token) as taken:
            async for chunk in until(taken, events()):
                yield chunk

    return event_stream(stream())


@router.post("/runs/{run_id}/cancel")
async def cancel_run(run_id: str, user_id: UserId, store: AppStore, runs: Runs) -> dict[str, Any]:
    """Cancel a live run: its subagents are cancelled, and all of it is recorded as such."""
    found = await asyncio.to_thread(store.get_run, run_id, user_id)
    if found is None:
        raise _no_run(run_id)
    if found.status not in ("running", "waiting", "interrupted"):
        raise ApiError(409, "not_running", f"run {run_id} already ended ({found.status}): nothing to cancel")
    await runs.cancel(run_id, user_id)
    result = await asyncio.to_thread(run_json, store, run_id, user_id)
    assert result is not None
    return result


@router.post("/runs/{run_id}/resume", status_code=202)
async def resume_run(run_id: str, user_id: UserId, store: AppStore, runs: Runs) -> JSONResponse:
    """Continue an interrupted run in this server: answers already given are not asked again,
    finished subagents are reused. 409 unless the run is interrupted."""
    found = await asyncio.to_thread(store.get_run, run_id, user_id)
    if found is None:
        raise _no_run(run_id)
    if found.status != "interrupted":
        raise ApiError(409, "not_interrupted", f"run {run_id} is {found.status}: only an interrupted run resumes")
    try:
        await runs.resume(run_id, user_id)
    except UserError as exc:
        raise ApiError(409, "not_interrupted", str(exc)) from None
    return JSONResponse({"run_id": run_id, "status": "running"}, 202, headers={"Location": f"/api/v1/runs/{run_id}"})


_LIMITS = tuple(f.name for f in fields(RunLimits) if f.name in RunRequest.model_fields)
"""The limits a request may give (each a field of `RunRequest` named as its `RunLimits` field)."""


def _always_ready(model: str | None) -> None:
    del model


def check_prompt(prompt: str, cap: int, where: str) -> None:
    """A 422 `ApiError` for a prompt past the server's limit."""
    if len(prompt) > cap:
        message = (
            f"{where}: {len(prompt):,} characters, more than this server's limit of {cap:,}: shorten it, "
            "or put the long text in a file of the workspace and name the file"
        )
        raise ApiError(422, "invalid_request", message, problems=[message])


def _no_run(run_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no run {run_id!r}: list yours with GET /api/v1/runs")
