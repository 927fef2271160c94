"""Threads over HTTP: `POST /runs` with `"continue": RUN_ID`, `GET /threads`, `GET /threads/{id}`.

A thread is the chain of runs that continue one another (see `delegate.run._threads`). Everything
is the caller's own: a run or thread of another user answers 404, as if it did not exist. A run
that has not ended (`running`, `waiting`, `interrupted`) or that another run already continued
answers 409, saying which run and what to do.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends

from .._config import RunLimits
from .._errors import UserError
from .._store import Store, why_not_continuable
from .._usage import Usage
from ..run import stored_run
from ._auth import ApiError, UserId, app_store
from ._sse import Offset, Page

if TYPE_CHECKING:
    from ._runs import RunManager

router = APIRouter(prefix="/api/v1", tags=["threads"])
AppStore = Annotated[Store, Depends(app_store)]


async def continue_thread(
    runs: RunManager,
    user_id: str,
    prompt: str,
    model: str | None,
    limits: RunLimits,
    uploads: list[dict[str, Any]] | None,
    previous: str,
) -> str:
    """Start a run continuing the caller's run `previous`: 404 if there is none, 409 if it has not
    ended or was continued already (by a request that came first)."""
    run = await asyncio.to_thread(runs.store.get_run, previous, user_id)
    if run is None:
        raise ApiError(404, "not_found", f"no run {previous!r} to continue: list yours with GET /api/v1/runs")
    why = why_not_continuable(run)
    if why is not None:
        raise ApiError(409, "not_ended", why)
    try:
        return await runs.start(user_id, prompt, model, limits, uploads, continue_from=previous)
    except UserError as exc:
        if "already continued" in str(exc):
            raise ApiError(409, "already_continued", str(exc)) from None
        raise


def thread_json(store: Store, thread_id: str, user_id: str) -> dict[str, Any] | None:
    """What `GET /threads/{id}` answers: the thread's runs in order, each the stored run's JSON
    (prompt, status, final answer, usage, subagents, ...), the usage of them all, and the
    thread's uploads (its last run's list, which holds those of the runs before)."""
    rows = store.thread_runs(thread_id, user_id)
    if not rows:
        return None
    turns: list[dict[str, Any]] = []
    for row in rows:
        found = stored_run(store, row.id, user_id)
        if found is not None:
            turns.append(found[1])
    last = rows[-1]
    return {
        "thread_id": thread_id,
        "status": last.status,
        "last_run_id": last.id,
        "usage": sum((r.usage for r in rows), Usage()).to_dict(),
        "uploaded_files": last.uploaded_files or [],
        "runs": turns,
    }


@router.get("/threads")
async def list_threads(
    user_id: UserId,
    store: AppStore,
    offset: Offset = 0,
    limit: Page = 50,
) -> dict[str, Any]:
    """The caller's threads, the last continued first: each with its last run's status and id,
    its number of turns, its first prompt and the usage of all its runs."""
    threads = await asyncio.to_thread(store.list_threads, user_id, limit=limit, offset=offset)
    return {"threads": [t.to_dict() for t in threads], "offset": offset}


@router.get("/threads/{thread_id}")
async def get_thread(thread_id: str, user_id: UserId, store: AppStore) -> dict[str, Any]:
    """One thread of the caller's: its runs in order (each with prompt, status, final answer,
    usage and subagents), its usage, and its uploads."""
    found = await asyncio.to_thread(thread_json, store, thread_id, user_id)
    if found is None:
        raise ApiError(404, "not_found", f"no thread {thread_id!r}: list yours with GET /api/v1/threads")
    return found
