"""Memory and skills over HTTP, each the caller's own: `GET|POST /memory`, `GET|DELETE
/memory/{id}`, `GET /skills`, `PUT|DELETE /skills/{name}`.

A note is the caller's when the caller wrote it (or its agents did): another user's note answers
404, as if it did not exist, and a search never finds one. A skill's choice (`PUT /skills/{name}`
with `{"enabled": false}`) is the caller's own, over the operator's default (`DELETE` goes back to
the default); the skills listed are those the caller's runs can find, the caller's own shadowing
the operator's by name.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from .._errors import UserError
from ..memory import Notes, Reader
from ..skills import SkillSettings
from ._auth import ApiError, UserId
from ._body import body_schema, json_body
from ._sse import Offset, Page
from ._state import app_state

router = APIRouter(prefix="/api/v1", tags=["memory"])


class NoteRequest(BaseModel):
    """The body of `POST /memory`: a note for the caller's agents (the lead's notes, `local`)."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="What agents should know in later runs (at most 2,000 characters).")


class SkillChoice(BaseModel):
    """The body of `PUT /skills/{name}`."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(description="Whether the caller's runs see the skill.")


async def _notes(request: Request) -> Notes:
    return await asyncio.to_thread(Notes, app_state(request.app).store)


async def _settings(request: Request) -> SkillSettings:
    return await asyncio.to_thread(SkillSettings, app_state(request.app).store)


NotesDep = Annotated[Notes, Depends(_notes)]
SettingsDep = Annotated[SkillSettings, Depends(_settings)]


def _not_found(note_id: int) -> ApiError:
    return ApiError(404, "not_found", f"no note {note_id}: list yours with GET /api/v1/memory")


@router.get("/memory")
async def list_notes(
    user_id: UserId,
    notes: NotesDep,
    q: Annotated[str | None, Query(description="Words to search for (the best match first).")] = None,
    offset: Offset = 0,
    limit: Page = 50,
) -> dict[str, Any]:
    """The caller's notes, the latest first, or those that match `q`."""
    reader = Reader(user_id)
    try:
        if q is not None:
            found = await asyncio.to_thread(lambda: notes.search(reader, q, limit=limit))
        else:
            found = await asyncio.to_thread(lambda: notes.latest(reader, limit=limit, offset=offset))
    except UserError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    return {"notes": [n.to_dict() for n in found], "offset": offset}


@router.post("/memory", status_code=201, openapi_extra=body_schema(NoteRequest))
async def add_note(
    request: Request, body: Annotated[NoteRequest, Depends(json_body(NoteRequest))], user_id: UserId, notes: NotesDep
) -> JSONResponse:
    """Keep a note for the caller's agents, in the caller's workspace."""
    workspace = str(app_state(request.app).workspace_for(user_id).root)
    try:
        note = await asyncio.to_thread(notes.write, Reader(user_id, workspace), body.text)
    except UserError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None
    return JSONResponse(note.to_dict(), 201, headers={"Location": f"/api/v1/memory/{note.id}"})


@router.get("/memory/{note_id}")
async def get_note(note_id: int, user_id: UserId, notes: NotesDep) -> dict[str, Any]:
    """One of the caller's notes."""
    note = await asyncio.to_thread(notes.get, Reader(user_id), note_id)
    if note is None:
        raise _not_found(note_id)
    return note.to_dict()


@router.delete("/memory/{note_id}")
async def forget_note(note_id: int, user_id: UserId, notes: NotesDep) -> dict[str, Any]:
    """Forget one of the caller's notes: its agents never see it again."""
    try:
        note = await asyncio.to_thread(notes.forget, Reader(user_id), note_id)
    except UserError:
        raise _not_found(note_id) from None
    return {"forgotten": note.to_dict()}


@router.get("/skills", tags=["skills"])
async def list_skills(request: Request, user_id: UserId, settings: SettingsDep) -> dict[str, Any]:
    """The skills the caller's runs can find, each with `enabled` (what runs see), `default` (the
    operator's) and `choice` (the caller's own, null: none)."""
    catalogue = await asyncio.to_thread(app_state(request.app).skills, user_id)
    rows = await asyncio.to_thread(settings.listing, user_id, catalogue)
    return {"skills": rows}


async def _skill_row(request: Request, settings: SkillSettings, user_id: str, name: str) -> dict[str, Any]:
    catalogue = await asyncio.to_thread(app_state(request.app).skills, user_id)
    rows = await asyncio.to_thread(settings.listing, user_id, catalogue)
    found = next((row for row in rows if row["name"] == name), None)
    if found is None:
        raise ApiError(404, "not_found", f"no skill {name!r}: list yours with GET /api/v1/skills")
    return found


@router.put("/skills/{name}", tags=["skills"], openapi_extra=body_schema(SkillChoice))
async def choose_skill(
    request: Request,
    name: str,
    body: Annotated[SkillChoice, Depends(json_body(SkillChoice))],
    user_id: UserId,
    settings: SettingsDep,
) -> dict[str, Any]:
    """Enable or disable a skill for the caller's runs (the caller's own choice, over the default)."""
    await _skill_row(request, settings, user_id, name)
    await asyncio.to_thread(settings.choose, user_id, name, body.enabled)
    return await _skill_row(request, settings, user_id, name)


@router.delete("/skills/{name}", tags=["skills"])
async def default_skill(request: Request, name: str, user_id: UserId, settings: SettingsDep) -> dict[str, Any]:
    """Forget the caller's choice: the skill follows the operator's default again."""
    await _skill_row(request, settings, user_id, name)
    await asyncio.to_thread(settings.clear, user_id, name)
    return await _skill_row(request, settings, user_id, name)
