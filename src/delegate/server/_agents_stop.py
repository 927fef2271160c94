"""`POST /api/v1/runs/{id}/agents/{agent_id}/stop`: stop one subagent of a running run.

The stop goes the way a cancellation from another process goes (`Store.request_stop`): the
process running the run, this server or another, takes it at its next heartbeat, the subagent
ends `cancelled` (stop reason `stopped`, the reason given), and its lead gets that result and
goes on. Owner-scoped: another user's run answers 404.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from .._errors import UserError
from .._store import Store
from ._auth import ApiError, UserId, app_store
from ._body import body_schema, optional_json_body

router = APIRouter(prefix="/api/v1", tags=["runs"])
AppStore = Annotated[Store, Depends(app_store)]
MAX_REASON = 500
"""The most characters of a stop's reason kept."""
UNSTORED_WAIT = 0.25
"""Seconds a stop of a subagent the store has not seen start waits before it looks again (a run's
recorder writes what happened at most 0.05 s later, under load a little more)."""


class StopRequest(BaseModel):
    """The body of a stop (optional): why the subagent is stopped."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, description=f"Why; its first {MAX_REASON} characters are kept.")


@router.post("/runs/{run_id}/agents/{agent_id}/stop", status_code=202, openapi_extra=body_schema(StopRequest))
async def stop_agent(
    run_id: str,
    agent_id: str,
    body: Annotated[StopRequest | None, Depends(optional_json_body(StopRequest))],
    user_id: UserId,
    store: AppStore,
) -> JSONResponse:
    """Stop one running subagent (`{"reason": "..."}` optional): it ends `cancelled`, stop reason
    `stopped`, and the lead gets its result and goes on. 404 for a run that is not the caller's,
    409 when the run or the subagent is not running."""
    reason = body.reason[:MAX_REASON] if body is not None and body.reason else None
    if await asyncio.to_thread(store.get_run, run_id, user_id) is None:
        raise ApiError(404, "not_found", f"no run {run_id!r}: list yours with GET /api/v1/runs")
    try:
        try:
            await asyncio.to_thread(store.request_stop, run_id, agent_id, reason, user_id)
        except UserError as exc:
            if not str(exc).startswith("no subagent"):
                raise
            # Its start may not be stored yet (a run's events reach the store within a flush of
            # being shown live): look once more after one.
            await asyncio.sleep(UNSTORED_WAIT)
            await asyncio.to_thread(store.request_stop, run_id, agent_id, reason, user_id)
    except UserError as exc:
        message = str(exc)
        status, code = (409, "not_running")
        if "not a subagent id" in message:
            status, code = (400, "bad_request")
        elif message.startswith("no subagent"):
            status, code = (404, "not_found")
        raise ApiError(status, code, message) from None
    answer: dict[str, Any] = {"run_id": run_id, "agent_id": agent_id, "stop_requested": True, "reason": reason}
    return JSONResponse(answer, 202)
