"""`POST /api/v1/runs/{id}/agents/{agent_id}/stop`: stop one subagent of a running run.

The stop goes the way a cancellation from another process goes (`Store.request_stop`): the
process running the run, this server or another, takes it at its next heartbeat, the subagent
ends `cancelled` (stop reason `stopped`, the reason given), and its lead gets that result and
goes on. Owner-scoped: another user's run answers 404.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from .._errors import UserError
from .._store import Store
from ._auth import ApiError, UserId, app_store

router = APIRouter(prefix="/api/v1", tags=["runs"])
AppStore = Annotated[Store, Depends(app_store)]
MAX_REASON = 500
"""The most characters of a stop's reason kept."""


@router.post("/runs/{run_id}/agents/{agent_id}/stop", status_code=202)
async def stop_agent(run_id: str, agent_id: str, request: Request, user_id: UserId, store: AppStore) -> JSONResponse:
    """Stop one running subagent (`{"reason": "..."}` optional): it ends `cancelled`, stop reason
    `stopped`, and the lead gets its result and goes on. 404 for a run that is not the caller's,
    409 when the run or the subagent is not running."""
    reason = _reason(await request.body())
    if await asyncio.to_thread(store.get_run, run_id, user_id) is None:
        raise ApiError(404, "not_found", f"no run {run_id!r}: list yours with GET /api/v1/runs")
    try:
        await asyncio.to_thread(store.request_stop, run_id, agent_id, reason, user_id)
    except UserError as exc:
        status, code = (400, "bad_request") if "not a subagent id" in str(exc) else (409, "not_running")
        raise ApiError(status, code, str(exc)) from None
    body: dict[str, Any] = {"run_id": run_id, "agent_id": agent_id, "stop_requested": True, "reason": reason}
    return JSONResponse(body, 202)


def _reason(raw: bytes) -> str | None:
    if not raw.strip():
        return None
    try:
        body: object = json.loads(raw)
    except ValueError:
        raise ApiError(400, "bad_request", 'the body must be JSON: {"reason": "..."} (or empty)') from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_request", 'the body must be a JSON object: {"reason": "..."}')
    reason = body.get("reason")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if reason is not None and not isinstance(reason, str):
        raise ApiError(400, "bad_request", "reason must be a string")
    return reason[:MAX_REASON] if reason else None
