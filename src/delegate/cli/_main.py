"""`delegate run`, `delegate users ...`: the command line over `Runtime` (`delegate agents` is in
`_agents.py`).

Exit codes: 0 success, 1 the run failed (or was cancelled: Ctrl-C, SIGTERM and SIGHUP alike), 2 bad
usage or bad input, one line saying what to fix: `main` turns every `UserError` and `StoreError`
into that, and `--debug` (or `DELEGATE_DEBUG=1`) shows the traceback instead.
Heavy imports (the runtime, provider SDKs) happen inside the commands, so `--help` stays fast.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, get_type_hints

import typer

from .._text import plural, safe_json, safe_text
from .._time import iso

if TYPE_CHECKING:
    from .._events import Event, EventSink
    from .._run_result import RunResult
    from .._runtime import Runtime
    from .._settings import RuntimeSettings
    from .._store import Store
    from .._workspace import CommandPolicy

_T = TypeVar("_T")

app = typer.Typer(
    name="delegate",
    help="Run LLM agents that hand work to subagents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
agents_app = typer.Typer(help="The subagent catalogue.", no_args_is_help=True)
users_app = typer.Typer(help="Users of the HTTP API.", no_args_is_help=True)
app.add_typer(agents_app, name="agents")
app.add_typer(users_app, name="users")

Workspace = Annotated[
    Path, typer.Option("--workspace", "-w", help="The workspace folder (default: the current folder).")
]
ModelAlias = Annotated[
    list[str] | None,
    typer.Option(
        "--model-alias",
        help="alias=provider:model, e.g. sonnet=openai:gpt-4.1 (over DELEGATE_MODEL_ALIASES, .delegate/models.toml).",
    ),
]
Db = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: DELEGATE_DB, else SQLite in <workspace>/.delegate/)."),
]


Agents = Annotated[list[Path] | None, typer.Option("--agents", help="A folder of subagent definitions.")]
Skills = Annotated[list[Path] | None, typer.Option("--skills", help="A folder of skills.")]
McpConfig = Annotated[Path | None, typer.Option("--mcp-config", help="MCP servers, in .mcp.json's mcpServers format.")]
AllowCommands = Annotated[bool, typer.Option("--allow-commands", help="Let agents run shell commands (sandboxed).")]
AllowNetwork = Annotated[bool, typer.Option("--allow-network", help="Let agents' commands reach the network.")]
CommandEnv = Annotated[
    list[str] | None,
    typer.Option("--command-env", help="An environment variable agents' commands may see (repeat for more)."),
]
CommandLimit = Annotated[
    list[str] | None,
    typer.Option(
        "--command-limit",
        metavar="NAME=VALUE",
        help="A cap of each agent's command (repeat for more): processes=512, memory=4G (each process), "
        "file_size=1G, open_files=1024, cpu_seconds=600 (each process), tmp_size=512M, disk_quota=10G "
        "(the workspace; 0: none). See docs/security.md.",
    ),
]
Unsandboxed = Annotated[
    bool,
    typer.Option(
        "--unsandboxed-commands",
        help="Run agents' commands WITHOUT the bubblewrap sandbox, as your own user (where bwrap cannot run).",
    ),
]
ContextWindow = Annotated[
    int | None,
    typer.Option(
        "--context-window",
        min=1024,
        envvar="DELEGATE_CONTEXT_WINDOW",
        help="Tokens the model reads at once (default: what the model says, or the table of known models).",
    ),
]
MaxRepeatedFailures = Annotated[
    int, typer.Option("--max-repeated-failures", min=0, help="End an agent when one call failed this often (0: off).")
]
MaxIdleSteps = Annotated[
    int, typer.Option("--max-idle-steps", min=0, help="End an agent after N turns without progress (0: off).")
]


@dataclass(frozen=True, kw_only=True)
class OperatorFlags:
    """The operator's flags of every command that runs agents (`delegate run`, `delegate serve`,
    `delegate batch submit|worker`), added to each by `operator_flags`: one list, so that a flag
    means the same everywhere and no command lacks one."""

    agents: Agents = None
    skills: Skills = None
    mcp_config: McpConfig = None
    allow_commands: AllowCommands = False
    allow_network: AllowNetwork = False
    command_env: CommandEnv = None
    command_limit: CommandLimit = None
    unsandboxed_commands: Unsandboxed = False
    model_alias: ModelAlias = None
    context_window: ContextWindow = None
    max_repeated_failures: MaxRepeatedFailures = 3
    max_idle_steps: MaxIdleSteps = 10


def operator_flags(command: Callable[..., _T]) -> Callable[..., _T]:
    """`command` with the options of `OperatorFlags` after its own, handed to it as `flags`."""
    options = get_type_hints(OperatorFlags, include_extras=True)
    shared = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=options[f.name])
        for f in fields(OperatorFlags)
    ]
    own = inspect.signature(command, eval_str=True)

    @functools.wraps(command)
    def with_flags(**values: Any) -> _T:
        flags = OperatorFlags(**{f.name: values.pop(f.name) for f in fields(OperatorFlags)})
        return command(**values, flags=flags)

    kept = [p for p in own.parameters.values() if p.name != "flags"]
    with_flags.__signature__ = own.replace(parameters=[*kept, *shared])  # type: ignore[attr-defined]  # what typer reads
    return with_flags


def runtime_settings(
    workspace: Path,
    flags: OperatorFlags,
    *,
    model: str | None = None,
    kind: type[RuntimeSettings] | None = None,
    **more: Any,
) -> RuntimeSettings:
    """The operator's flags as `RuntimeSettings` (or as `kind`, the server's `ServerSettings`), the
    one thing every command builds runtimes from; `more` are fields the flags do not name.

    Raises `UserError` for a bad workspace or MCP configuration.
    """
    from .._errors import UserError
    from .._guard import LoopGuard
    from .._settings import RuntimeSettings
    from ..mcp import load_mcp_config

    if not workspace.is_dir():
        raise UserError(f"workspace {str(workspace)!r} is not a folder: create it or pass --workspace DIR")
    policy = command_policy(
        flags.allow_commands, flags.allow_network, flags.command_env, flags.unsandboxed_commands, flags.command_limit
    )
    failures, idle = flags.max_repeated_failures, flags.max_idle_steps
    guard = LoopGuard(repeated_failures=failures or None, idle_steps=idle or None) if failures or idle else None
    return (kind or RuntimeSettings)(
        workspace=workspace,
        model=model,
        agents_dirs=flags.agents or [],
        skills_dirs=flags.skills or [],
        mcp_servers=load_mcp_config(flags.mcp_config) if flags.mcp_config else (),
        allow_commands=flags.allow_commands,
        commands=policy,
        context_window=flags.context_window,
        loop_guard=guard,
        model_aliases=flags.model_alias or [],
        **more,
    )


def command_policy(
    allow_commands: bool, network: bool, env: list[str] | None, unsandboxed: bool, limits: list[str] | None = None
) -> CommandPolicy:
    """The command flags as a `CommandPolicy`; running commands unsandboxed is said out loud.

    Raises `UserError` for a `--command-limit` that is not `NAME=VALUE` of a known cap.
    """
    from .._command_limits import CommandLimits
    from .._workspace import CommandPolicy

    caps = CommandLimits().with_settings(limits or [])

    if allow_commands and unsandboxed:
        typer.echo(
            "warning: agents' commands run WITHOUT a sandbox (--unsandboxed-commands): as your own user, "
            "with your files and the network",
            err=True,
        )
    return CommandPolicy(sandbox=not unsandboxed, network=network, env=tuple(env or ()), limits=caps)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def print_warnings(runtime: Runtime) -> None:
    """What is wrong with the definition and skill files the runtime read, one line each on stderr."""
    for warning in runtime.warnings():
        typer.echo(f"warning: {warning}", err=True)


def print_run_warnings(event: Event) -> None:
    """What goes wrong as a run goes on, on stderr as it happens: an MCP server that did not start
    (the run goes on without its tools), a type whose aliased model has no key (it runs on the lead's)."""
    if event.type == "mcp.server_failed":
        typer.echo(f"warning: {event.data['warning']}", err=True)
    elif event.type == "warning" and "subagent_type" in event.data:
        typer.echo(f"warning: {event.data['reason']}", err=True)


def store_option(db: str | None) -> str | None:
    return db or os.environ.get("DELEGATE_DB") or None


def open_store(workspace: Path, db: str | None) -> Store:
    """The store of `--db`, `DELEGATE_DB`, or the workspace's own."""
    from .._store import Store

    url = store_option(db)
    return Store.open(url) if url else Store.for_workspace(workspace.resolve())


def checked_text(text: str, what: str) -> str:
    """`text` from the command line, refused unless it is valid UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(text[exc.start]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else f"character U+{ord(text[exc.start]):04X}"
        fail(f"{what} is not valid UTF-8 ({shown} at position {exc.start}): pass it as UTF-8 text")
    return text


def run_until_done(start: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run `start()` on a new event loop, SIGTERM and SIGHUP cancelling it as Ctrl-C does (the
    run records itself cancelled); raises `KeyboardInterrupt` when it was cancelled so."""

    async def main() -> _T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, task.cancel)
        return await start()

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        raise KeyboardInterrupt from None


LOCAL_TIMEOUT = 300.0
"""Seconds a `delegate run` on the embedded local model may take unless `--timeout` says otherwise:
on a CPU it reads about 20 tokens a second, and with nobody watching a run once went on for 14
minutes (89,500 tokens) on work it could not do."""

NO_MODEL = (
    "no model configured: pass --model provider:name (e.g. --model openai:gpt-4.1-mini), set DELEGATE_MODEL, "
    "or set OPENAI_API_KEY (or OPENAI_BASE_URL for vLLM, Ollama, llama.cpp) or ANTHROPIC_API_KEY"
)


def default_model(named: str | None, *, what: str) -> str | None:
    """The model of a command that runs agents (`what`: its runs, its items), checked when the
    operator named none: with no `--model`, no `DELEGATE_MODEL` and no provider's key, the small
    embedded model is never chosen in silence. Off a terminal (a script, a pipe, `--json` into a
    file) that is bad usage, exit 2, saying what to set; on one, a warning on stderr. Returns
    `named`, or `local` when it was chosen so."""
    if named is not None or os.environ.get("DELEGATE_MODEL"):
        return named
    from ..models import default_model_spec

    if default_model_spec() != "local":
        return None  # a provider whose key is set: `resolve_model` takes it
    if not sys.stdout.isatty():
        fail(
            f"{NO_MODEL}. To run the small embedded model (SmolLM2-135M: slow, and weak at real work), "
            "name it: --model local (or DELEGATE_MODEL=local)"
        )
    typer.echo(
        f"warning: {NO_MODEL}; {what} use the small embedded model (SmolLM2-135M: slow, and weak at real work). "
        "Press Ctrl-C and pass --model for a real one.",
        err=True,
    )
    return "local"


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
    prompt: Annotated[str | None, typer.Argument(help="What the lead agent should do.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="provider:name, e.g. openai:gpt-4.1-mini")] = None,
    workspace: Workspace = Path("."),
    max_parallel: Annotated[int, typer.Option("--max-parallel", min=1, help="Subagents running at once.")] = 16,
    subagent_model: Annotated[str | None, typer.Option("--subagent-model", help="Model for subagents.")] = None,
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, help="Step limit of the lead.")] = 50,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.001,
            help="Seconds the run may take, subagents included (default: 3600; 300 on the local model).",
        ),
    ] = None,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Continue this interrupted run (see `delegate runs list`).")
    ] = None,
    detach_batches: Annotated[
        bool,
        typer.Option("--detach-batches", help="Leave the batches the lead submits to `delegate batch worker`."),
    ] = False,
    token_budget: Annotated[
        int | None, typer.Option("--token-budget", min=1, help="Tokens the whole run may spend (lead and subagents).")
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option("--max-requests", min=1, help="Model requests the whole run may make.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object with the result.")] = False,
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Run the lead agent on PROMPT to its final answer (or `--resume RUN_ID` an interrupted run)."""
    if (prompt is None) == (resume is None):
        fail("give a PROMPT, or --resume RUN_ID to continue an interrupted run (not both)")
    if prompt is not None:  # a new run (a resumed one keeps its model)
        checked_text(prompt, "the prompt")
        model, timeout = _model_and_timeout(model, timeout)
    settings = runtime_settings(
        workspace, flags, model=model, max_parallel=max_parallel, subagent_model=subagent_model, max_steps=max_steps
    )
    runtime = settings.build(store=store_option(db))
    if timeout is not None:
        runtime.timeout = timeout
    runtime.token_budget, runtime.max_requests = token_budget, max_requests
    if resume is None:
        runtime.model  # noqa: B018 - resolve now: a bad provider or a missing key is bad usage
    print_warnings(runtime)
    live = not as_json and sys.stdout.isatty()
    batches: list[dict[str, Any]] = []
    runtime.sinks.append(lambda e: batches.append(e.data) if e.type == "batch.submitted" else None)
    runtime.sinks.append(print_run_warnings)
    lead_batches = None
    if not detach_batches:
        from ._batch import LeadBatches, runner_factory

        lead_batches = LeadBatches(runtime, runner_factory(settings))
        runtime.sinks.append(lead_batches.sink)

    async def go(sinks: list[EventSink]) -> RunResult:
        finished = False
        try:
            if resume is not None:
                result = await runtime.resume(resume, sinks=sinks)
            else:
                assert prompt is not None
                result = await runtime.run(prompt, sinks=sinks)
            finished = True
            return result
        finally:
            if lead_batches is not None:  # the lead's batches run here, to their end
                for batch in await lead_batches.finish(wait=finished):
                    typer.echo(f"Batch {batch.id} ({plural(batch.total, 'item')}) ended {batch.status}.", err=True)
            await runtime.aclose()

    try:
        if live:
            from ._render import run_live

            result = run_live(go)
        else:
            result = run_until_done(lambda: go([]))
    except KeyboardInterrupt:
        fail("cancelled", 1)
    report(result, as_json=as_json, printed=live, detached=batches if detach_batches else [])


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
        typer.echo(safe_text(result.final))
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
        users = _users_store(workspace, db).list_users()
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
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "status", "created", "token made", "revoked")
    for row in rows:
        table.add_row(
            row["name"], row["status"], row["created_at"], row["token_created_at"] or "", row["revoked_at"] or ""
        )
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
