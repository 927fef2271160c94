"""`GET /api/v1/runs/{id}/agents/{agent_id}/calls`: one agent's model calls, and what each was
sent and answered where the store keeps it (see `delegate.run.agent_calls`: read from the run's
events and the conversations it keeps anyway, never a store of its own).

Owner-scoped as every run route: another user's run, or an agent the run does not have, answers
404. The agent id is only compared with the ids of the run's own events and records.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path

from .._store import Store
from ..run import agent_calls
from ._auth import ApiError, UserId, app_store

router = APIRouter(prefix="/api/v1", tags=["runs"])
AppStore = Annotated[Store, Depends(app_store)]
AgentId = Annotated[str, Path(min_length=1, max_length=200, description="`lead`, or a subagent's id.")]


def _calls(store: Store, run_id: str, user_id: str, agent_id: str) -> dict[str, Any]:
    run = store.get_run(run_id, user_id)
    if run is None:
        raise ApiError(404, "not_found", f"no run {run_id!r}: list yours with GET /api/v1/runs")
    found = agent_calls(store, run, agent_id)
    if found is None:
        raise ApiError(404, "not_found", f"run {run_id} has no agent {agent_id!r}: its agents are in GET /runs/{{id}}")
    return found.to_dict()


@router.get("/runs/{run_id}/agents/{agent_id}/calls")
async def model_calls(run_id: str, agent_id: AgentId, user_id: UserId, store: AppStore) -> dict[str, Any]:
    """The agent's model calls in order (step, model, times, usage with `cost_usd`), its system
    prompt and conversation as kept, and for each call how many of those messages it was sent
    (`request_messages`) and which one it answered (`answer_message`); null with a `note` (and
    `why_not_kept` for the whole agent) where the store does not keep them."""
    return await asyncio.to_thread(_calls, store, run_id, user_id, agent_id)
