"""`delegate runs approve`, and the question `delegate run` puts on a terminal: decisions on calls
that wait for a person (a call under an `ask` permission rule; see docs/approvals.md).

A decision is stored in the run's store, from any process; the process running the run finds it
at its next heartbeat (the way `delegate runs cancel` reaches it), or at once when it is this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._text import shown_arguments
from ._common import Db, Workspace, fail, open_store

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from rich.console import Console

    from .._events import Event
    from ..run import Runtime


QUESTION = "[a]pprove, [d]eny, a[l]ways for this rule? "
LONG_QUESTION = "[v]iew all, [a]pprove, [d]eny, a[l]ways for this rule? "
SHOWN_CHARS = 2000
"""Characters of a call's arguments printed with its question; past it, the person sees them all in
a pager (or in the file they are written to) before the call can be approved."""


def register(runs_app: typer.Typer) -> None:
    runs_app.command("approve")(runs_approve)


def runs_approve(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    call_ids: Annotated[
        list[str] | None, typer.Argument(help="The waiting calls to decide (see `delegate runs show ID`).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Decide every call of the run that waits.")] = False,
    deny: Annotated[bool, typer.Option("--deny", help="Deny the calls (default: approve them).")] = False,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why: given to the model with a denial, kept with the decision.")
    ] = None,
    always: Annotated[
        bool, typer.Option("--always", help="Approve the run's later calls of the same rules too, without asking.")
    ] = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Approve (or --deny) calls of a run that wait for a person, from any process on the run's store."""
    if bool(call_ids) == every:
        fail("name the calls to decide (CALL_ID ...), or --all for every call that waits (not both)")
    if always and deny:
        fail("--always approves a rule for the rest of the run: it cannot go with --deny")
    store = open_store(workspace, db)
    run = store.get_run(run_id)
    if run is None:
        fail(f"no run {run_id!r}: list the runs with `delegate runs list`")
    ids = call_ids or [a.call_id for a in store.approvals(run_id, pending=True)]
    if not ids:
        fail(f"run {run_id} ({run.status}) has no call waiting for a decision")
    decision = "deny" if deny else "approve"
    for call_id in ids:
        row = store.decide_approval(run_id, call_id, decision, reason, always=always)
        said = ("denied" if deny else "approved") + (f" ({reason})" if reason else "")
        typer.echo(f"{call_id} ({row.tool}): {said}" + (f"; every later call of {row.rule} too" if always else ""))
        typer.echo(_arguments_said(call_id, row.arguments))


def _arguments_said(call_id: str, arguments: dict[str, Any]) -> str:
    """What `runs approve` prints of a call it decided: its whole arguments, or, past
    `SHOWN_CHARS`, their count of characters and the file that holds them whole."""
    text = shown_arguments(arguments)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"its arguments ({len(text):,} characters) are whole in {_whole_in_file(call_id, text)}"


def _whole_in_file(call_id: str, text: str) -> str:
    """A file of this user's alone (0600, in the system's temporary folder, out of agents' reach)
    holding `text`: a call's whole arguments."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in call_id)[:60]
    fd, path = tempfile.mkstemp(prefix=f"delegate-call-{safe}-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text + "\n")
    return path


def _page(text: str) -> None:
    """Show `text` in the person's pager (`$PAGER`, else `less`), where they can read all of it."""
    command = shlex.split(os.environ.get("PAGER") or "less") or ["less"]
    try:
        subprocess.run(command, input=text.encode("utf-8", "replace"), check=False)
    except OSError:
        subprocess.run(["more"], input=text.encode("utf-8", "replace"), check=False)


def ask_inline(runtime: Runtime) -> Callable[[Console, Event], Awaitable[None]]:
    """The question `delegate run` puts on its terminal for each call that waits: approve, deny
    (with a reason), or approve always for that rule in this run."""
    from rich.text import Text

    from .._errors import UserError

    always: set[str] = set()
    """Rules the person approved for the rest of the run: their calls are not asked about again."""

    async def ask(console: Console, event: Event) -> None:
        data = event.data
        rule = data.get("rule")
        if rule is not None and rule in always:
            with contextlib.suppress(UserError):  # decided already, by the runtime itself
                await runtime.decide(event.run_id, str(data["call_id"]), approve=True, reason="always", always=True)
            return
        who = event.agent_id if not data.get("subagent_type") else f"{event.agent_id} ({data['subagent_type']})"
        console.print(Text(f"{who} asks to call {data['tool']} (rule {rule}):", style="bold magenta"))
        text = shown_arguments(await _whole_arguments(runtime, event))
        choice = await _choose(console, str(data["call_id"]), text)
        approve, for_rule = choice != "d", choice == "l"
        if for_rule and rule is not None:
            always.add(rule)
        reason = ""
        if not approve:
            reason = (await asyncio.to_thread(console.input, Text("reason (given to the agent): "))).strip()
        try:
            await runtime.decide(event.run_id, str(data["call_id"]), approve=approve, reason=reason, always=for_rule)
        except UserError as exc:
            console.print(f"note: {exc}", markup=False)

    return ask


async def _choose(console: Console, call_id: str, text: str) -> str:
    """Show a waiting call's arguments `text` and ask for a decision: `a`, `d` or `l`. Past
    `SHOWN_CHARS` the head is printed, the whole written to a file and offered in a pager (`v`),
    and the call cannot be approved before the person has paged through it (denying it can)."""
    from rich.text import Text

    seen = len(text) <= SHOWN_CHARS
    console.print(text if seen else text[:SHOWN_CHARS], markup=False)
    if not seen:
        path = await asyncio.to_thread(_whole_in_file, call_id, text)
        console.print(
            Text(
                f"… the arguments are {len(text):,} characters long, and {len(text) - SHOWN_CHARS:,} more are "
                f"not shown above: [v] shows them all in a pager; they are also whole in {path}",
                style="bold yellow",
            )
        )
    while True:
        answer = (await asyncio.to_thread(console.input, Text(QUESTION if seen else LONG_QUESTION))).strip()
        choice = answer[:1].lower()
        if choice == "v":
            await asyncio.to_thread(_page, text)
            seen = True
        elif choice in ("a", "l") and not seen:
            console.print(Text("see all of the arguments first: [v] (or deny: [d])", style="bold yellow"))
        elif choice in ("a", "d", "l"):
            return choice


async def _whole_arguments(runtime: Runtime, event: Event) -> dict[str, Any]:
    """The waiting call's arguments, whole: its event cuts a long text (`EVENT_VALUE_LIMIT`), so
    they are read from the store's request when there is one."""
    arguments: dict[str, Any] = event.data.get("arguments") or {}
    store = runtime.store
    if store is None:
        return arguments
    call_id = str(event.data["call_id"])
    rows = await asyncio.to_thread(store.approvals, event.run_id, under=call_id)
    return next((row.arguments for row in rows if row.call_id == call_id), arguments)
