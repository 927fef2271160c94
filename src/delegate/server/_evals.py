"""Evaluations over HTTP: `GET /evals`, `GET /evals/{id}` (its report as JSON) and
`GET /evals/{id}/report.html` (the standalone page). Everything is the caller's own: another
user's eval answers 404, as if it did not exist; its attempts are runs of its owner, so
`GET /runs/{id}` of one answers 404 to anyone else too. Evals are started with `delegate eval`
(or the Python API) by the operator, for a user or not (see docs/eval.md)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from ..eval import EvalReport, Evals, build_report, render_html
from ._auth import ApiError, UserId, app_state
from ._sse import Page

router = APIRouter(prefix="/api/v1", tags=["evals"])


async def app_evals(request: Request) -> Evals:
    """The evals of the app serving `request` (set by `create_app`)."""
    return app_state(request.app).evals


AppEvals = Annotated[Evals, Depends(app_evals)]


def _report(evals: Evals, eval_id: str, user_id: str) -> EvalReport | None:
    row = evals.get(eval_id, user_id)
    return None if row is None else build_report(row, evals.attempts(eval_id))


async def _owned(evals: Evals, eval_id: str, user_id: str) -> EvalReport:
    report = await asyncio.to_thread(_report, evals, eval_id, user_id)
    if report is None:
        raise ApiError(404, "not_found", f"no eval {eval_id!r}: list yours with GET /api/v1/evals")
    return report


@router.get("/evals")
async def list_evals(user_id: UserId, evals: AppEvals, limit: Page = 50) -> dict[str, Any]:
    """The caller's evals, newest first: id, suite, status, and each arm's successes."""

    def read() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for row in evals.list(user_id, limit=limit):
            report = build_report(row, evals.attempts(row.id))
            arms = {a.name: {"succeeded": a.succeeded, "judged": a.judged} for a in report.arms}
            found.append({"eval_id": row.id, "suite": row.name, "status": report.status, "arms": arms})
        return found

    return {"evals": await asyncio.to_thread(read)}


@router.get("/evals/{eval_id}")
async def get_eval(eval_id: str, user_id: UserId, evals: AppEvals) -> dict[str, Any]:
    """One eval of the caller's: its report (per arm, per task, every attempt with its run id)."""
    return (await _owned(evals, eval_id, user_id)).to_dict()


@router.get("/evals/{eval_id}/report.html", response_class=HTMLResponse)
async def eval_page(eval_id: str, user_id: UserId, evals: AppEvals) -> HTMLResponse:
    """One eval of the caller's, as the standalone HTML report."""
    return HTMLResponse(render_html(await _owned(evals, eval_id, user_id)))
