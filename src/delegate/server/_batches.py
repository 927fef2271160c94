"""The batch routes (`/api/v1/batches...`) and the batch worker the server runs in its own process.

Every route is a thin layer over `delegate.batch.Batches`, which scopes each call to the caller and
validates a submission completely before storing anything. Item events come from the worker in
this process; a batch's progress (`batch.status`) is read from the store, so a client also sees
the work of `delegate batch worker` processes on other machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from .._empty import empty_list
from .._events import Event
from .._store import Store
from ..batch import ITEM_STATUSES, Batch, Batches, BatchWorker, ItemStatus, loads_json, repeated_fields
from ..run import RuntimeFactory
from ..workspace import Home
from ._auth import ApiError, Token, Tokens, UserId
from ._body import body_schema, json_body, optional_json_body
from ._runs import check_prompt
from ._sse import KEEPALIVE, Offset, Page, event_stream, poll, sse, until
from ._state import app_state

_log = logging.getLogger("delegate.server")

POLL_INTERVAL = 1.0
"""How often a follower of a batch reads its counts again when nothing in this process woke it."""
SETTLE_TIME = 0.1
"""How long a follower of a batch that just ended waits for the item events that trail its end."""


class BatchRequest(BaseModel):
    """The body of `POST /batches`: the items and how to run them (the same as `delegate batch submit`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    subagent_type: str = Field(
        validation_alias=AliasChoices("subagent_type", "type"), description="The subagent type that runs each item."
    )
    items: list[Any] = Field(
        description='One {"key", "prompt", "acceptance_criteria"?, "limits"?} object per item; its limits '
        "tighten the batch's."
    )
    title: str | None = None
    max_running_items: int | None = None
    max_live_items: int | None = None
    max_attempts: int | None = None
    model: str | None = Field(default=None, description="provider:name for the items; the server's default if omitted.")
    limits: dict[str, Any] | None = Field(
        default=None,
        description="Run limits of every item by their RunLimits names (cost_budget, token_budget, timeout, ...): "
        "each may lower the server's, never raise it.",
    )


@dataclass(eq=False, slots=True)
class _Follower:
    """One client following a batch: the item events it has not sent yet, and what wakes it."""

    loop: asyncio.AbstractEventLoop
    events: list[Event] = field(default_factory=empty_list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def tell(self, event: Event | None) -> None:
        """On the follower's loop: keep an item event (None: the batch changed) and wake it."""
        if event is not None:
            self.events.append(event)
        self.wake.set()

    def take(self) -> list[tuple[str, dict[str, Any] | None]]:
        events, self.events = self.events, []
        return [(e.type, e.data) for e in events]


class BatchService:
    """The server's `Batches`, its in-process worker, and the followers of batch events."""

    def __init__(
        self,
        store: Store,
        *,
        runtime_for: RuntimeFactory,
        home_for: Callable[[str], Home],
        known_types: Callable[[str], list[str]],
        check_model: Callable[[str], None],
        max_prompt_chars: int | None = None,
    ) -> None:
        self.batches = Batches(store)
        self.runtime_for = runtime_for
        self.home_for = home_for
        """The folder a user's batches are submitted in, and their items run in (`Home.of` its workspace)."""
        self.known_types = known_types
        self.check_model = check_model
        self.max_prompt_chars = max_prompt_chars
        self.worker: BatchWorker | None = None
        self._followers: dict[str, set[_Follower]] = {}
        self._lock = threading.Lock()
        self.batches.listeners.append(self._on_change)

    async def start_worker(self) -> None:
        """Run batch items in this process, as `delegate batch worker` does."""
        # A runtime for one serving session of a batch (its owner and model), shared by its items;
        # the worker closes it when the session ends, so no batch keeps one after it is served.
        self.worker = BatchWorker(self.batches, self.runtime_for, emit=self._on_event)
        await self.worker.start()

    async def stop_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            await worker.stop()

    def _on_event(self, event: Event) -> None:
        """The worker's event sink (on the event loop): pass item events to the batch's followers."""
        self._tell(str(event.data.get("batch_id", "")), event)

    def _on_change(self, batch_id: str) -> None:
        """Called by `Batches`, in whatever thread changed the batch: followers read it again."""
        self._tell(batch_id, None)

    def _tell(self, batch_id: str, event: Event | None) -> None:
        with self._lock:
            followers = list(self._followers.get(batch_id, ()))
        for follower in followers:
            with contextlib.suppress(RuntimeError):  # its loop has closed
                follower.loop.call_soon_threadsafe(follower.tell, event)

    def submit(self, user_id: str, body: BatchRequest, raw: bytes | None = None) -> Batch:
        """Submit a batch (its items wait in the store until a worker runs them, so a model that is
        still being prepared, like the local model's first download, is no reason to refuse it).

        `raw` is the request body `body` was read from: read again here (in a worker thread, after
        the token was checked) to find an item that names a field twice, which the JSON parser
        before it kept silently (the last value)."""
        items = body.items
        if raw is not None:
            again = loads_json(raw)
            if repeated := repeated_fields(again):
                twice = ", ".join(map(repr, repeated))
                raise ApiError(422, "invalid_request", f"the body gives {twice} more than once: give each field once")
            items = cast(dict[str, Any], again)["items"]  # the same items, each marked if it repeats a field
        if self.max_prompt_chars is not None:
            for n, item in enumerate(body.items):
                prompt = cast(dict[str, Any], item).get("prompt") if isinstance(item, dict) else None
                if isinstance(prompt, str):
                    check_prompt(prompt, self.max_prompt_chars, f"items[{n}].prompt")
        if body.model is not None:
            self.check_model(body.model)
        submission = self.batches.submit(
            user_id,
            subagent_type=body.subagent_type,
            items=items,
            title=body.title,
            max_running_items=body.max_running_items,
            max_live_items=body.max_live_items,
            max_attempts=body.max_attempts,
            model=body.model,
            known_types=self.known_types(user_id),
            limits=body.limits,
            home=self.home_for(user_id),
        )
        return submission.batch  # `Batches` tells the worker (its listener) about the new batch

    def retry(self, user_id: str, batch_id: str, key: str | None) -> dict[str, Any]:
        retried = self.batches.retry(user_id, batch_id, key)
        return {"retried": retried, "batch": self.batches.get(user_id, batch_id).to_dict()}

    async def follow(self, user_id: str, batch_id: str) -> AsyncIterator[tuple[str, dict[str, Any] | None]]:
        """`(type, data)` pairs: `batch.status` whenever the status or counts change (first at once),
        `batch.item` as this process's worker finishes an item; ends once the batch is done.
        `("", None)` marks a stretch of silence."""
        follower = _Follower(asyncio.get_running_loop())
        with self._lock:
            self._followers.setdefault(batch_id, set()).add(follower)
        shown: dict[str, Any] | None = None

        async def step() -> tuple[list[tuple[str, dict[str, Any] | None]], bool]:
            nonlocal shown
            found = follower.take()
            batch = await asyncio.to_thread(self.batches.get, user_id, batch_id)
            if batch.done:
                # The worker emits an ended batch's last item events just after it stores them:
                # pass those on before the final status.
                while True:
                    follower.wake.clear()
                    try:
                        await asyncio.wait_for(follower.wake.wait(), SETTLE_TIME)
                    except TimeoutError:
                        break
                    found += follower.take()
                batch = await asyncio.to_thread(self.batches.get, user_id, batch_id)
            now = batch.to_dict()
            if now != shown or batch.done:
                shown = now
                found.append(("batch.status", now))
            return found, batch.done

        try:
            async for item in poll(step, interval=POLL_INTERVAL, wake=follower.wake):
                yield item if item is not None else ("", None)
        finally:
            with self._lock:
                followers = self._followers.get(batch_id, set())
                followers.discard(follower)
                if not followers:
                    self._followers.pop(batch_id, None)


async def _service(request: Request) -> BatchService:
    return app_state(request.app).batches


Service = Annotated[BatchService, Depends(_service)]
router = APIRouter(prefix="/api/v1", tags=["batches"])


@router.post("/batches", status_code=201, openapi_extra=body_schema(BatchRequest))
async def submit_batch(
    body: Annotated[BatchRequest, Depends(json_body(BatchRequest))], user_id: UserId, service: Service, request: Request
) -> JSONResponse:
    """Submit a batch: validated completely first; a rejected batch stores nothing."""
    raw = await request.body()  # read once already, by `json_body`, after the token was checked
    batch = await asyncio.to_thread(service.submit, user_id, body, raw)
    return JSONResponse(batch.to_dict(), 201, headers={"Location": f"/api/v1/batches/{batch.id}"})


@router.get("/batches")
async def list_batches(
    user_id: UserId,
    service: Service,
    offset: Offset = 0,
    limit: Page = 50,
) -> dict[str, Any]:
    """The caller's batches, newest first, each with its counts per item status."""
    found = await asyncio.to_thread(service.batches.list_batches, user_id, offset=offset, limit=limit)
    return {"batches": [b.to_dict() for b in found], "offset": offset}


@router.get("/batches/{batch_id}")
async def get_batch(batch_id: str, user_id: UserId, service: Service) -> dict[str, Any]:
    """A batch: its status, caps, and the number of its items in each status."""
    return (await asyncio.to_thread(service.batches.get, user_id, batch_id)).to_dict()


@router.get("/batches/{batch_id}/items")
async def batch_items(
    batch_id: str,
    user_id: UserId,
    service: Service,
    status: Annotated[str | None, Query(description=f"One of {', '.join(ITEM_STATUSES)}.")] = None,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """A page of the batch's items in submission order, optionally only those in one status."""
    wanted = _item_status(status)
    found = await asyncio.to_thread(
        functools.partial(service.batches.items, user_id, batch_id, status=wanted, offset=offset, limit=limit)
    )
    return {"items": [i.to_dict() for i in found], "status": wanted, "offset": offset, "limit": limit}


@router.get("/batches/{batch_id}/turns")
async def item_turns(
    batch_id: str,
    user_id: UserId,
    service: Service,
    key: Annotated[str, Query(min_length=1, description="The item's key (in the query: any key, `..` too).")],
) -> dict[str, Any]:
    """The turns of an item's last attempt that ran a subagent: `turns`, its model calls and tool
    calls as the events that told them (`model.request`, `model.response`, `tool.started`,
    `tool.completed`, `warning`, `compaction`; `{type, ts, agent_id, tool_call_id, data}`), or
    null when none are kept (no attempt ran one yet, or it ran before they were kept)."""
    turns = await asyncio.to_thread(service.batches.item_turns, user_id, batch_id, key)
    return {"key": key, "turns": turns}


@router.post("/batches/{batch_id}/pause")
async def pause_batch(batch_id: str, user_id: UserId, service: Service) -> dict[str, Any]:
    """No new item starts; running items finish."""
    return (await asyncio.to_thread(service.batches.pause, user_id, batch_id)).to_dict()


@router.post("/batches/{batch_id}/resume")
async def resume_batch(batch_id: str, user_id: UserId, service: Service) -> dict[str, Any]:
    """Start items again after a pause."""
    return (await asyncio.to_thread(service.batches.resume, user_id, batch_id)).to_dict()


@router.post("/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, user_id: UserId, service: Service) -> dict[str, Any]:
    """Cancel for good: queued items never start, running ones are stopped."""
    return (await asyncio.to_thread(service.batches.cancel, user_id, batch_id)).to_dict()


class RetryRequest(BaseModel):
    """The optional body of `POST /batches/{id}/retry`: one item, named in the body."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1, description="The failed item to retry (any key, `..` too).")


@router.post("/batches/{batch_id}/retry", openapi_extra=body_schema(RetryRequest, required=False))
async def retry_failed(
    batch_id: str,
    user_id: UserId,
    service: Service,
    body: Annotated[RetryRequest | None, Depends(optional_json_body(RetryRequest))],
) -> dict[str, Any]:
    """Queue every failed item again, each with a fresh budget of attempts; with a body
    `{"key": K}`, only that item. Keys such as `.` and `..` cannot travel in a URL path (clients
    resolve them as dot segments, so `items/../retry` reaches this route): name them in the body."""
    return await asyncio.to_thread(service.retry, user_id, batch_id, None if body is None else body.key)


@router.post("/batches/{batch_id}/items/{key:path}/retry")
async def retry_item(batch_id: str, key: str, user_id: UserId, service: Service) -> dict[str, Any]:
    """Queue one failed item again, with a fresh budget of attempts."""
    return await asyncio.to_thread(service.retry, user_id, batch_id, key)


@router.get("/batches/{batch_id}/results.jsonl")
async def export(batch_id: str, user_id: UserId, service: Service) -> StreamingResponse:
    """Every item as one JSON line (key, status, attempts, summary, artifacts, usage, acceptance)."""
    await asyncio.to_thread(service.batches.get, user_id, batch_id)  # 404 before the first byte

    def lines() -> Iterator[bytes]:
        for row in service.batches.export_rows(user_id, batch_id):
            yield (json.dumps(row, ensure_ascii=False) + "\n").encode()

    return StreamingResponse(
        lines(),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="batch-{batch_id}.jsonl"'},
    )


@router.get("/batches/{batch_id}/events")
async def batch_events(
    batch_id: str, user_id: UserId, token: Token, tokens: Tokens, service: Service
) -> StreamingResponse:
    """Server-sent events: `batch.status` (status and counts) as they change, and `batch.item` as
    this server's worker finishes items; the stream ends once the batch is done (or, with a
    `token.revoked` event, once the token is revoked or replaced)."""
    await asyncio.to_thread(service.batches.get, user_id, batch_id)  # 404 before the stream opens

    async def events() -> AsyncIterator[bytes]:
        seq = 0
        async for type_, data in service.follow(user_id, batch_id):
            if data is None:
                yield KEEPALIVE
                continue
            seq += 1
            yield sse(seq, type_, data)

    async def stream() -> AsyncIterator[bytes]:
        with tokens.hold(token) as taken:
            async for chunk in until(taken, events()):
                yield chunk

    return event_stream(stream())


def _item_status(status: str | None) -> ItemStatus | None:
    if status is None or status == "":
        return None
    for known in ITEM_STATUSES:
        if known == status:
            return known
    known = ", ".join(ITEM_STATUSES)
    raise ApiError(422, "invalid_request", f"status: unknown item status {status!r}; use one of {known}")
