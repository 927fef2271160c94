"""Calls that wait for a person, over HTTP: `GET /runs/{id}/approvals` and
`POST /runs/{id}/approvals/{call_id}` with `{"decision": "approve" | "deny", "reason": "..."}`.

Owner-scoped like every route: another user's run answers 404, as if it did not exist. The
decision is stored; the process that runs the run (this server or another) finds it at its next
heartbeat and the call goes on, or reaches the model as a denial with the reason.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from .._errors import UserError
from .._store import Store
from ._auth import ApiError, UserId, app_store
from ._body import body_schema, json_body

router = APIRouter(prefix="/api/v1", tags=["runs"])
AppStore = Annotated[Store, Depends(app_store)]


class DecisionRequest(BaseModel):
    """A person's decision on a call that waits: `approve` or `deny`, and why (given to the model
    with a denial)."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=4000)
    always: bool = Field(
        default=False,
        description="With approve: approve the run's later calls of the same rule too, without asking. Only this "
        "says so: a reason's words never do.",
    )


@router.get("/runs/{run_id}/approvals")
async def list_approvals(run_id: str, user_id: UserId, store: AppStore) -> dict[str, Any]:
    """The run's calls that waited for a person (`decision` null: it waits still), in the order they asked."""
    if await asyncio.to_thread(store.get_run, run_id, user_id) is None:
        raise _no_run(run_id)
    rows = await asyncio.to_thread(store.approvals, run_id)
    return {"approvals": [row.to_dict() for row in rows]}


@router.post("/runs/{run_id}/approvals/{call_id}", openapi_extra=body_schema(DecisionRequest))
async def decide(
    run_id: str,
    call_id: str,
    body: Annotated[DecisionRequest, Depends(json_body(DecisionRequest))],
    user_id: UserId,
    store: AppStore,
) -> dict[str, Any]:
    """Approve or deny a call that waits (`always`: its rule's later calls too): 404 for another
    user's run or an unknown call, 409 for a call decided already (the first decision stands),
    422 for a denial `always`."""
    if await asyncio.to_thread(store.get_run, run_id, user_id) is None:
        raise _no_run(run_id)
    if body.always and body.decision != "approve":
        message = "always: only an approval can be given always (deny each call)"
        raise ApiError(422, "invalid_request", message, problems=[message])
    decide = functools.partial(store.decide_approval, always=body.always)
    try:
        row = await asyncio.to_thread(decide, run_id, call_id, body.decision, body.reason, user_id)
    except UserError as exc:
        if "decided already" in str(exc):
            raise ApiError(409, "decided", str(exc)) from None
        raise ApiError(404, "not_found", str(exc)) from None
    return row.to_dict()


def _no_run(run_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no run {run_id!r}: list yours with GET /api/v1/runs")
