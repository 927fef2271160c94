"""`delegate runs approve`, and the question `delegate run` puts on a terminal: decisions on calls
that wait for a person (a call under an `ask` permission rule; see docs/approvals.md).

A decision is stored in the run's store, from any process; the process running the run finds it
at its next heartbeat (the way `delegate runs cancel` reaches it), or at once when it is this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._common import Db, Workspace, fail, open_store

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from rich.console import Console

    from .._events import Event
    from ..run import Runtime


QUESTION = "[a]pprove, [d]eny, a[l]ways for this rule? "


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
        console.print(json.dumps(data.get("arguments", {}), ensure_ascii=False, indent=2)[:2000], markup=False)
        while True:
            answer = (await asyncio.to_thread(console.input, Text(QUESTION))).strip()
            if answer[:1].lower() in ("a", "d", "l"):
                break
        approve, for_rule = answer[:1].lower() != "d", answer[:1].lower() == "l"
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
