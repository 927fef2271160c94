"""`delegate memory list|show|search|add|forget` (the notes agents keep from run to run, as the
local user sees them in the workspace) and `delegate skills list|enable|disable` (which skills
runs see: the operator's defaults, or one user's own choices with `--user NAME`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._config import LOCAL_USER
from ._common import Db, OperatorFlags, Skills, Workspace, checked_workspace, fail, open_store

if TYPE_CHECKING:
    from .._store import Store
    from ..memory import Note, Notes, Reader

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]

memory_app = typer.Typer(help="Notes agents keep from one run for the next (memory_write).", no_args_is_help=True)
skills_app = typer.Typer(help="Which skills runs see, per user.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(memory_app, name="memory")
    app.add_typer(skills_app, name="skills")


def _notes(workspace: Path, db: str | None) -> tuple[Notes, Reader]:
    from .._errors import UserError
    from ..memory import Notes, Reader

    try:
        store = open_store(workspace, db)
    except UserError as exc:
        fail(str(exc))
    return Notes(store), Reader(LOCAL_USER, str(checked_workspace(workspace).resolve()))


def _line(note: Note) -> str:
    who = f" {note.agent}" if note.agent else ""
    text = " ".join(note.text.split())
    return (
        f"{note.id:>5}  {note.updated_at:%Y-%m-%d}  [{note.scope}{who}]  {text[:100]}{'…' if len(text) > 100 else ''}"
    )


def _print(notes: list[Note], as_json: bool, empty: str) -> None:
    if as_json:
        typer.echo(json.dumps([n.to_dict() for n in notes], ensure_ascii=False))
    elif not notes:
        typer.echo(empty)
    for note in [] if as_json else notes:
        typer.echo(_line(note))


@memory_app.command("list")
def memory_list(
    workspace: Workspace = Path("."),
    db: Db = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many notes.")] = 50,
    agent: Annotated[str | None, typer.Option("--agent", help="Only this subagent type's own notes.")] = None,
    as_json: AsJson = False,
) -> None:
    """The notes agents see in this workspace, the latest first."""
    notes, reader = _notes(workspace, db)
    _print(notes.latest(reader, limit=limit, agent=agent), as_json, "No notes yet: agents keep them with memory_write.")


@memory_app.command("show")
def memory_show(note_id: int, workspace: Workspace = Path("."), db: Db = None, as_json: AsJson = False) -> None:
    """One note, whole."""
    notes, reader = _notes(workspace, db)
    note = notes.get(reader, note_id)
    if note is None:
        fail(f"no note {note_id} here: `delegate memory list` shows the notes there are")
    if as_json:
        typer.echo(json.dumps(note.to_dict(), ensure_ascii=False))
        return
    who = f", {note.agent}'s own" if note.agent else ""
    by = f" by {note.written_by} in {note.run_id}" if note.written_by else ""
    typer.echo(f"note {note.id} [{note.scope}{who}], written {note.updated_at:%Y-%m-%d %H:%M} UTC{by}")
    typer.echo(note.text)


@memory_app.command("search")
def memory_search(
    query: str,
    workspace: Workspace = Path("."),
    db: Db = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many notes.")] = 20,
    as_json: AsJson = False,
) -> None:
    """The notes that match any word of QUERY, the best match first (the database's full-text search)."""
    from .._errors import UserError

    notes, reader = _notes(workspace, db)
    try:
        found = notes.search(reader, query, limit=limit)
    except UserError as exc:
        fail(str(exc))
    _print(found, as_json, f"No note matches {query!r}.")


@memory_app.command("add")
def memory_add(text: str, workspace: Workspace = Path("."), db: Db = None) -> None:
    """Keep a note for this workspace's agents (the lead's notes); prints its id alone on its last line."""
    from .._errors import UserError

    notes, reader = _notes(workspace, db)
    try:
        note = notes.write(reader, text)
    except UserError as exc:
        fail(str(exc))
    typer.echo(note.id)


@memory_app.command("forget")
def memory_forget(note_ids: list[int], workspace: Workspace = Path("."), db: Db = None) -> None:
    """Delete notes by id (agents never see them again)."""
    from .._errors import UserError

    notes, reader = _notes(workspace, db)
    for note_id in note_ids:
        try:
            notes.forget(reader, note_id)
        except UserError as exc:
            fail(str(exc))
        typer.echo(f"Forgot note {note_id}.")


# -- skills ---------------------------------------------------------------------------------------

User = Annotated[
    str | None,
    typer.Option("--user", help="A user of the HTTP API (`delegate users list`): its own choice, over the default."),
]


def _user_id(store: Store, name: str | None) -> str | None:
    if name is None:
        return None
    found = next((u for u in store.list_users() if u.name == name), None)
    if found is None:
        fail(f"no user named {name!r}: `delegate users list` shows them")
    return found.id


@skills_app.command("list")
def skills_list(
    workspace: Workspace = Path("."), db: Db = None, skills: Skills = None, user: User = None, as_json: AsJson = False
) -> None:
    """Every skill, and whether runs see it (the operator's default, or USER's own choice)."""
    from .._errors import UserError
    from ..skills import SkillSettings

    try:
        store = open_store(workspace, db)
        user_id = _user_id(store, user)
        settings = OperatorFlags(skills=skills).settings(workspace, user_level=True)
        rows = SkillSettings(store).listing(user_id or LOCAL_USER, settings.skills(user_id))
    except UserError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        typer.echo("No skills: put one in .delegate/skills/NAME/SKILL.md (or pass --skills DIR).")
    for row in rows:
        mark = "on " if row["enabled"] else "off"
        why = "" if row["choice"] is None else " (the user's own choice)"
        typer.echo(f"{mark}  {row['name']}: {row['description']}{why}")


def _choose(workspace: Path, db: str | None, skills: list[Path] | None, name: str, user: str | None, on: bool) -> None:
    from .._errors import UserError
    from ..skills import SkillSettings

    try:
        store = open_store(workspace, db)
        user_id = _user_id(store, user)
        SkillSettings.known(OperatorFlags(skills=skills).settings(workspace, user_level=True).skills(user_id), name)
        SkillSettings(store).choose(user_id, name, on)
    except UserError as exc:
        fail(str(exc))
    whose = f"for {user}" if user else "by default, for every user without a choice of their own"
    typer.echo(f"{'Enabled' if on else 'Disabled'} {name} {whose}.")


@skills_app.command("enable")
def skills_enable(
    name: str, workspace: Workspace = Path("."), db: Db = None, skills: Skills = None, user: User = None
) -> None:
    """Let runs see skill NAME (by default, or USER's)."""
    _choose(workspace, db, skills, name, user, True)


@skills_app.command("disable")
def skills_disable(
    name: str, workspace: Workspace = Path("."), db: Db = None, skills: Skills = None, user: User = None
) -> None:
    """Hide skill NAME from runs (by default, or USER's): no index line, no mount, no /NAME."""
    _choose(workspace, db, skills, name, user, False)
