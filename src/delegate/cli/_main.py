"""`delegate run`, `delegate users ...`: the command line over `Runtime` (what every command
shares is in `_common.py`; `delegate agents` is in `_agents.py`).

Exit codes: 0 success, 1 the run failed (or was cancelled: Ctrl-C, SIGTERM and SIGHUP alike), 2 bad
usage or bad input, one line saying what to fix: `main` turns every `UserError` and `StoreError`
into that, and `--debug` (or `DELEGATE_DEBUG=1`) shows the traceback instead.
Heavy imports (the runtime, provider SDKs) happen inside the commands, so `--help` stays fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._text import plural, safe_json
from .._time import iso
from ._chat import Continue, check_continue, continue_order, continued_run
from ._common import (
    LOCAL_TIMEOUT,
    Db,
    MaxDepth,
    OperatorFlags,
    StallTimeout,
    Workspace,
    checked_text,
    default_model,
    fail,
    open_store,
    operator_flags,
    print_run_warnings,
    print_waiting_calls,
    print_warnings,
    read_store,
    run_until_done,
    stall_seconds,
    store_option,
)
from ._workflow import WorkflowArgs, WorkflowFile, parse_args, read_script, workflow_app

if TYPE_CHECKING:
    from .._config import RunLimits
    from .._events import EventSink
    from .._store import Store
    from ..run import RunResult, Runtime, RuntimeSettings
    from ..workflows import Workflow
    from ._run_temporal import TemporalOrder

app = typer.Typer(
    name="delegate",
    help="Run LLM agents that hand work to subagents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every subcommand inherits them (see _help.py)
)


def _print_version() -> None:
    from importlib.metadata import version

    typer.echo(f"delegate {version('delegate')}")


def _version(value: bool) -> None:
    if value:
        _print_version()
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool | None,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print delegate's version and exit."),
    ] = None,
) -> None:
    """Run LLM agents that hand work to subagents.

    Example: delegate run "Summarise docs/*.md into SUMMARY.md" --model openai:gpt-4.1-mini
    """


@app.command("version")
def version_command() -> None:
    """Print delegate's version (as `delegate --version` and `-V` do).

    Example: delegate version
    """
    _print_version()


users_app = typer.Typer(help="Users of the HTTP API.", no_args_is_help=True)
app.add_typer(users_app, name="users")
app.add_typer(workflow_app, name="workflow")


MODEL, LIMITS, OUT = "Model", "Limits", "Output and history"
"""The panels of `delegate run --help` (the operator's flags have theirs, in `_common.py`)."""


def _model_and_timeout(model: str | None, timeout: float | None) -> tuple[str | None, float | None]:
    """A new run's model (see `default_model`) and timeout: `LOCAL_TIMEOUT` on the embedded model
    (`local`, `local:<file>`, named or chosen) unless `--timeout` was given, said on stderr."""
    model = default_model(model, what="runs")
    spec = model or os.environ.get("DELEGATE_MODEL") or ""
    if timeout is None and spec.strip().partition(":")[0] == "local":
        timeout = LOCAL_TIMEOUT
        typer.echo(f"note: a run on the local model stops after {LOCAL_TIMEOUT:g} s; --timeout S for longer", err=True)
    return model, timeout


@app.command()
@operator_flags
def run(
    prompt: Annotated[
        str | None,
        typer.Argument(
            help="What the lead agent should do; `-` (or no PROMPT with a pipe on stdin) reads it from stdin."
        ),
    ] = None,
    continue_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[RUN_ID]", help="With --continue: the run to continue (default: the latest).", show_default=False
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="provider:name, e.g. openai:gpt-4.1-mini", rich_help_panel=MODEL)
    ] = None,
    workspace: Workspace = Path("."),
    continue_thread: Continue = False,
    max_parallel: Annotated[
        int | None,
        typer.Option("--max-parallel", min=1, help="Subagents running at once (default: 16).", rich_help_panel=LIMITS),
    ] = None,
    subagent_model: Annotated[
        str | None, typer.Option("--subagent-model", help="Model for subagents.", rich_help_panel=MODEL)
    ] = None,
    max_steps: Annotated[
        int, typer.Option("--max-steps", min=1, help="Step limit of the lead.", rich_help_panel=LIMITS)
    ] = 50,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.001,
            help="Seconds the run may take, subagents included (default: 3600; 300 on the local model).",
            rich_help_panel=LIMITS,
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option("--resume", help="Continue this interrupted run (see `delegate runs list`).", rich_help_panel=OUT),
    ] = None,
    detach_batches: Annotated[
        bool,
        typer.Option(
            "--detach-batches",
            help="Leave the batches the lead submits to `delegate batch worker`.",
            rich_help_panel=OUT,
        ),
    ] = False,
    token_budget: Annotated[
        int | None,
        typer.Option(
            "--token-budget", min=1, help="Tokens the whole run may spend (lead and subagents).", rich_help_panel=LIMITS
        ),
    ] = None,
    max_requests: Annotated[
        int | None,
        typer.Option("--max-requests", min=1, help="Model requests the whole run may make.", rich_help_panel=LIMITS),
    ] = None,
    cost_budget: Annotated[
        float | None,
        typer.Option(
            "--cost-budget",
            min=0.000001,
            help="US dollars the whole run may spend, priced by genai-prices (every model needs a price).",
            rich_help_panel=LIMITS,
        ),
    ] = None,
    approval_timeout: Annotated[
        float | None,
        typer.Option(
            "--approval-timeout",
            min=0.001,
            help="Seconds a call under an --ask rule waits for a decision before it is denied (default: no limit).",
            rich_help_panel=LIMITS,
        ),
    ] = None,
    stall_timeout: StallTimeout = None,
    max_depth: MaxDepth = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object with the result.", rich_help_panel=OUT)
    ] = False,
    db: Db = None,
    workflow_file: WorkflowFile = None,
    workflow_args: WorkflowArgs = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Run the lead agent on PROMPT to its final answer (or `--resume RUN_ID` an interrupted run,
    or `--workflow FILE` a plan written as a script, PROMPT saying what it is for)."""
    prompt, continue_id = continue_order(continue_thread, prompt, continue_id)
    script = read_script(workflow_file) if workflow_file is not None else None
    prompt = _checked_inputs(prompt, script, resume)
    check_continue(continue_thread, continue_id, resume)
    options = {"timeout": timeout, "token_budget": token_budget, "max_requests": max_requests}
    options |= {"cost_budget": cost_budget, "max_parallel": max_parallel, "approval_timeout": approval_timeout}
    given = given_limits(
        options | {"stall_timeout": stall_timeout, "max_depth": max_depth}
    )  # a new run's, a resume's over its own
    if prompt is not None or script is not None:  # a new run (a resumed one keeps its model)
        model, timeout = _model_and_timeout(model, timeout)
    from .._config import RunLimits
    from ..agents import Lead

    limits = RunLimits().over(given | ({"timeout": timeout} if timeout is not None else {}))
    lead = Lead(max_steps=max_steps, subagent_model=subagent_model)
    settings = flags.settings(workspace, model=model, lead=lead, limits=limits, user_level=True)  # ~/.claude too
    runtime = _built(settings, db, resolve_model=resume is None)
    continue_from = continued_run(runtime, continue_thread, continue_id)
    print_warnings(runtime)
    plan = _plan(script, prompt, workflow_args)
    if settings.engine.temporal:  # the run goes to a worker, under this runtime's gates
        from ._run_temporal import TemporalOrder

        order = TemporalOrder(prompt or "", model, limits, resume, given, continue_from, plan)
        return _on_temporal(settings, runtime, order, as_json=as_json)
    live = not as_json and sys.stdout.isatty()
    batches: list[dict[str, Any]] = []
    runtime.sinks.append(lambda e: batches.append(e.data) if e.type == "batch.submitted" else None)
    runtime.sinks.append(print_run_warnings)
    if not live:  # on a terminal the call is asked inline
        runtime.sinks.append(print_waiting_calls)
    lead_batches = None
    if not detach_batches:
        from ._batch import LeadBatches

        lead_batches = LeadBatches(runtime, settings.factory(store=False))
        runtime.sinks.append(lead_batches.sink)

    async def go(sinks: list[EventSink]) -> RunResult:
        finished = False
        try:
            if resume is not None:  # under the limits it was started with, but for those given here
                result = await runtime.resume(resume, sinks=sinks, limits=await resumed_limits(runtime, resume, given))
            elif plan is not None:
                result = await runtime.run(prompt or "", sinks=sinks, continue_from=continue_from, workflow=plan)
            else:
                assert prompt is not None
                result = await runtime.run(prompt, sinks=sinks, continue_from=continue_from)
            finished = True
            return result
        finally:
            if lead_batches is not None:  # the lead's batches run here, to their end
                for batch in await lead_batches.finish(wait=finished):
                    typer.echo(f"Batch {batch.id} ({plural(batch.total, 'item')}) ended {batch.status}.", err=True)
            await runtime.aclose()

    try:
        if live:
            from ._approve import ask_inline
            from ._render import run_live

            result = run_live(go, ask_inline(runtime))
        else:
            result = run_until_done(lambda: go([]))
    except KeyboardInterrupt:
        fail("cancelled", 1)
    report(result, as_json=as_json, printed=live, detached=batches if detach_batches else [])


@workflow_app.command("run")
@operator_flags
def workflow_run(
    file: Annotated[str, typer.Argument(help="The workflow script; `-` reads it from stdin; or a shipped one's name.")],
    description: Annotated[
        str | None, typer.Option("--description", "-d", help="What the workflow is for (the run's prompt).")
    ] = None,
    workflow_args: WorkflowArgs = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="provider:name, e.g. openai:gpt-4.1-mini", rich_help_panel=MODEL)
    ] = None,
    workspace: Workspace = Path("."),
    max_parallel: Annotated[
        int | None,
        typer.Option("--max-parallel", min=1, help="Agents running at once (default: 16).", rich_help_panel=LIMITS),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0.001, help="Seconds the run may take.", rich_help_panel=LIMITS)
    ] = None,
    token_budget: Annotated[
        int | None,
        typer.Option("--token-budget", min=1, help="Tokens all its agents may spend.", rich_help_panel=LIMITS),
    ] = None,
    cost_budget: Annotated[
        float | None,
        typer.Option(
            "--cost-budget", min=0.000001, help="US dollars all its agents may spend.", rich_help_panel=LIMITS
        ),
    ] = None,
    stall_timeout: StallTimeout = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object with the result.", rich_help_panel=OUT)
    ] = False,
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Run a workflow: a plan written as a Python script whose agent() calls are subagents
    (`delegate run --resume RUN_ID` continues one that was interrupted)."""
    run(
        prompt=description,
        continue_id=None,
        model=model,
        workspace=workspace,
        continue_thread=False,
        max_parallel=max_parallel,
        subagent_model=None,
        max_steps=50,
        timeout=timeout,
        resume=None,
        detach_batches=False,
        token_budget=token_budget,
        max_requests=None,
        cost_budget=cost_budget,
        approval_timeout=None,
        stall_timeout=stall_timeout,
        max_depth=None,
        as_json=as_json,
        db=db,
        workflow_file=file,
        workflow_args=workflow_args,
        **{f.name: getattr(flags, f.name) for f in fields(flags)},
    )


def _built(settings: RuntimeSettings, db: str | None, *, resolve_model: bool) -> Runtime:
    """The runtime of `delegate run`; its model resolved now when it runs here (a bad provider or
    a missing key is bad usage), never on Temporal (the worker's own)."""
    runtime = settings.build(store=store_option(db))
    if resolve_model and not settings.engine.temporal:
        runtime.model  # noqa: B018
    return runtime


def _plan(script: str | None, prompt: str | None, args: list[str] | None) -> Workflow | None:
    """The workflow `delegate run --workflow FILE` runs (None: none)."""
    from ..workflows import Workflow

    return None if script is None else Workflow(script=script, description=prompt or "", args=parse_args(args or []))


def _on_temporal(settings: RuntimeSettings, runtime: Runtime, order: TemporalOrder, *, as_json: bool) -> None:
    """Run `order` on a worker of the engine, under `runtime`'s gates, and report it as it ended."""
    from ._run_temporal import run_on_temporal

    try:
        result = run_on_temporal(settings, runtime, order)
    finally:
        asyncio.run(runtime.aclose())
    report(result, as_json=as_json, printed=False, detached=[])


def _checked_inputs(prompt: str | None, script: str | None, resume: str | None) -> str | None:
    """The prompt of `delegate run` (None: none), after checking that it, a workflow's `script`
    or `resume` says what to run."""
    prompt = _stdin_prompt(prompt, resume) if script is None or prompt == "-" else prompt
    if (prompt is None and script is None) == (resume is None):
        fail(
            "give a PROMPT (or `-` to read it from stdin), or --resume RUN_ID to continue an interrupted run (not both)"
        )
    if prompt is not None:
        checked_text(prompt, "the prompt")
    return prompt


def _stdin_prompt(prompt: str | None, resume: str | None) -> str | None:
    """The prompt: `-` reads it from stdin, and so does no PROMPT (and no --resume) when stdin is
    a pipe or a file (`git diff | delegate run`, `delegate run < task.md`), as `llm` does."""
    if prompt == "-" or (prompt is None and resume is None and not sys.stdin.isatty()):
        text = sys.stdin.read()
        if not text.strip():
            fail("the prompt read from stdin is empty: pipe in what the agent should do, or give a PROMPT")
        return text
    return prompt


def given_limits(options: dict[str, Any]) -> dict[str, Any]:
    """The limits the command line gives, by their `RunLimits` names (`options`: every limit
    option's value, None when not given): what a new run starts under over the defaults, and a
    resume in place of the run's own. A `stall_timeout` of 0 turns the watchdog off."""
    given = {name: value for name, value in options.items() if value is not None}
    if "stall_timeout" in given:
        given["stall_timeout"] = stall_seconds(given["stall_timeout"], None)
    return given


async def resumed_limits(runtime: Runtime, run_id: str, given: dict[str, Any]) -> RunLimits | None:
    """The limits `run_id` was started with, with those `given` on the command line in their place
    (None when none are given: the run's own)."""
    if not given or runtime.store is None:
        return None
    run = await asyncio.to_thread(runtime.store.get_run, run_id)
    return None if run is None else runtime.limits.over(run.limits or {}).over(given)


def report(result: RunResult, *, as_json: bool, printed: bool, detached: list[dict[str, Any]]) -> None:
    """Print a run's result (unless the live view `printed` it), and the batches left to workers;
    exit 1 unless it completed."""
    for batch in detached:
        typer.echo(
            f"Batch {batch['batch_id']} ({plural(batch['items'], 'item')}) was submitted; "
            f"`delegate batch worker` runs it "
            f"and `delegate batch status {batch['batch_id']}` follows it.",
            err=True,
        )
    if as_json:
        typer.echo(json.dumps(safe_json(result.to_dict()), ensure_ascii=False))
    elif not printed:
        from ._render import print_answer

        print_answer(result.final)
    if result.status != "completed":
        if not as_json and not printed:  # the live view said why
            typer.echo(f"run {result.run_id} ended {result.status}: {result.error or result.stop_reason}", err=True)
        raise typer.Exit(1)


@users_app.command("add")
def users_add(name: str, workspace: Workspace = Path("."), db: Db = None) -> None:
    """Create a user of the HTTP API and print its token (only a hash is kept)."""
    _, token = _users_store(workspace, db).add_user(name)
    typer.echo(f"Created user {name}. Its token (shown once):")
    typer.echo(token)


@users_app.command("list")
def users_list(
    workspace: Workspace = Path("."),
    db: Db = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show the users of the HTTP API: when each was created, when its token was made, whether it is revoked."""
    from .._errors import UserError
    from .._store import StoreBusyError

    try:
        store = read_store(workspace, db)  # reading creates no store where it is run
        users = [] if store is None else store.list_users()
    except (UserError, StoreBusyError) as exc:
        fail(str(exc))
    rows = [
        {
            "name": u.name,
            "status": "revoked" if u.revoked else "active",
            "created_at": iso(u.created_at),
            "token_created_at": iso(u.token_created_at),
            "revoked_at": iso(u.revoked_at),
        }
        for u in users
    ]
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        typer.echo("No users yet: create one with `delegate users add NAME`.")
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    def minute(when: datetime | None) -> str:
        return "" if when is None else when.astimezone(UTC).strftime("%Y-%m-%d %H:%M")

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True, pad_edge=False)
    for name in ("name", "status", "created (UTC)", "token made", "revoked"):
        table.add_column(name, no_wrap=name != "name")
    for u in users:
        status = "revoked" if u.revoked else "active"
        table.add_row(u.name, status, minute(u.created_at), minute(u.token_created_at), minute(u.revoked_at))
    Console().print(table)


@users_app.command("revoke")
def users_revoke(name: str, workspace: Workspace = Path("."), db: Db = None) -> None:
    """Refuse NAME's token from now on (401 at once); its runs and batches are kept. `users token` lets it in again."""
    from .._errors import UserError
    from .._store import StoreBusyError

    try:
        _users_store(workspace, db).revoke_user(name)
    except (UserError, StoreBusyError) as exc:
        fail(str(exc))
    typer.echo(f"Revoked {name}: its token is refused from now on. `delegate users token {name}` makes a new one.")


@users_app.command("token")
def users_token(name: str, workspace: Workspace = Path("."), db: Db = None) -> None:
    """Make a new token for NAME and print it (shown once); the old token stops working at once."""
    from .._errors import UserError
    from .._store import StoreBusyError

    try:
        _, token = _users_store(workspace, db).new_token(name)
    except (UserError, StoreBusyError) as exc:
        fail(str(exc))
    typer.echo(f"New token for {name} (shown once; the old one no longer works):")
    typer.echo(token)


def _users_store(workspace: Path, db: str | None) -> Store:
    """The store that `users` commands manage."""
    return open_store(workspace, db)
