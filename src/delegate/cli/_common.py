"""What every command of the command line shares: the operator's flags and the settings they
make, the one workspace check, the one store opener, how a command fails, how a run is driven.

Heavy imports (the runtime, provider SDKs) happen inside the functions, so `--help` stays fast.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, get_type_hints

import typer

if TYPE_CHECKING:
    from .._config import Extensions, LoopSettings, RunLimits
    from .._events import Event
    from .._store import Store
    from ..agents import Lead
    from ..run import Runtime, RuntimeSettings
    from ..workspace import CommandPolicy

_T = TypeVar("_T")


Workspace = Annotated[
    Path, typer.Option("--workspace", "-w", help="The workspace folder (default: the current folder).")
]
ModelAlias = Annotated[
    list[str] | None,
    typer.Option(
        "--model-alias",
        rich_help_panel="Model",
        help="alias=provider:model, e.g. sonnet=openai:gpt-4.1 (over DELEGATE_MODEL_ALIASES, .delegate/models.toml).",
    ),
]
Price = Annotated[
    list[str] | None,
    typer.Option(
        "--price",
        rich_help_panel="Model",
        metavar="[MODEL=]PRICE",
        help="How a model is priced (repeat for more; no MODEL=: every model): a provider of genai-prices' table "
        "(openai, anthropic, groq, ...), usd:IN/OUT or usd:IN/OUT/CACHED in US dollars per million tokens, or none. "
        "Over DELEGATE_PRICES. Default: openai:/anthropic: models by their provider's table behind any base URL, "
        "local at 0.",
    ),
]
Db = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: DELEGATE_DB, else SQLite in <workspace>/.delegate/)."),
]
StallTimeout = Annotated[
    float | None,
    typer.Option(
        "--stall-timeout",
        min=0,
        rich_help_panel="Limits",
        help="Seconds a tool call, MCP call or model request may go without progress before the idle watchdog "
        "ends it (default: 300; 0: never).",
    ),
]


MaxDepth = Annotated[
    int | None,
    typer.Option(
        "--max-depth",
        min=1,
        max=100,
        rich_help_panel="Limits",
        help="Levels of subagents: 1 (default) lets only the lead delegate, 2 lets its subagents start their own, ...",
    ),
]


def stall_seconds(given: float | None, default: float | None) -> float | None:
    """`RunLimits.stall_timeout` from `--stall-timeout`: `default` when not given, None for 0."""
    if given is None:
        return default
    return given or None


AGENTS, COMMANDS, LOOP = "Agents, skills and MCP", "Commands", "The loop"
"""The panels of `--help` the operator's flags are grouped in."""
Agents = Annotated[
    list[Path] | None, typer.Option("--agents", rich_help_panel=AGENTS, help="A folder of subagent definitions.")
]
Skills = Annotated[list[Path] | None, typer.Option("--skills", rich_help_panel=AGENTS, help="A folder of skills.")]
McpConfig = Annotated[
    Path | None,
    typer.Option("--mcp-config", rich_help_panel=AGENTS, help="MCP servers, in .mcp.json's mcpServers format."),
]
AllowCommands = Annotated[
    bool, typer.Option("--allow-commands", rich_help_panel=COMMANDS, help="Let agents run shell commands (sandboxed).")
]
AllowNetwork = Annotated[
    bool, typer.Option("--allow-network", rich_help_panel=COMMANDS, help="Let agents' commands reach the network.")
]
CommandEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--command-env",
        rich_help_panel=COMMANDS,
        help="An environment variable agents' commands may see (repeat for more).",
    ),
]
CommandLimit = Annotated[
    list[str] | None,
    typer.Option(
        "--command-limit",
        rich_help_panel=COMMANDS,
        metavar="NAME=VALUE",
        help="A cap of each agent's command (repeat for more): processes=512, memory=4G (all its processes "
        "together, where a memory cgroup can be made), file_size=1G, open_files=1024, cpu_seconds=600 (each "
        "process), tmp_size=512M, shm_size=64M, disk_quota=10G (the workspace; 0: none). See docs/security.md.",
    ),
]
Unsandboxed = Annotated[
    bool,
    typer.Option(
        "--unsandboxed-commands",
        rich_help_panel=COMMANDS,
        help="Run agents' commands WITHOUT the bubblewrap sandbox, as your own user (where bwrap cannot run).",
    ),
]
ContextWindow = Annotated[
    int | None,
    typer.Option(
        "--context-window",
        rich_help_panel=LOOP,
        min=1024,
        envvar="DELEGATE_CONTEXT_WINDOW",
        help="Tokens the model reads at once (default: what the model says, or the table of known models).",
    ),
]
Allow = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        metavar="RULE",
        help="A permission rule whose calls run (repeat for more): Bash(npm run test:*), Write, Edit(docs/**), "
        "mcp__server__tool, write_file. See docs/approvals.md.",
    ),
]
Ask = Annotated[
    list[str] | None,
    typer.Option(
        "--ask", metavar="RULE", help="A permission rule whose calls wait for a person's approval (repeat for more)."
    ),
]
Deny = Annotated[
    list[str] | None,
    typer.Option(
        "--deny",
        metavar="RULE",
        help="A permission rule whose calls are refused; a tool named whole is not offered (repeat for more).",
    ),
]
EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        envvar="DELEGATE_ENGINE",
        metavar="URL",
        help="Where the work executes: embedded (this process, the default) or temporal://HOST:PORT, optionally "
        "/NAMESPACE "
        "(workers started with `delegate worker` run it). See docs/scale-out.md.",
    ),
]
Outputs = Annotated[
    str,
    typer.Option(
        "--outputs",
        metavar="DIR",
        help="The folder, inside the workspace, where agents write what they deliver (/mnt/user-data/outputs).",
    ),
]
MaxRepeatedFailures = Annotated[
    int,
    typer.Option(
        "--max-repeated-failures",
        rich_help_panel=LOOP,
        min=0,
        help="End an agent when one call failed this often (0: off).",
    ),
]
MaxIdleSteps = Annotated[
    int,
    typer.Option(
        "--max-idle-steps", rich_help_panel=LOOP, min=0, help="End an agent after N turns without progress (0: off)."
    ),
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
    price: Price = None
    context_window: ContextWindow = None
    max_repeated_failures: MaxRepeatedFailures = 3
    max_idle_steps: MaxIdleSteps = 10
    allow: Allow = None
    ask: Ask = None
    deny: Deny = None
    engine: EngineOption = None
    outputs: Outputs = "outputs"

    def loop(self) -> LoopSettings:
        """`--context-window`, `--max-repeated-failures` and `--max-idle-steps` (0 switches a rule off)."""
        from .._config import LoopGuard, LoopSettings

        failures, idle = self.max_repeated_failures, self.max_idle_steps
        guard = LoopGuard(repeated_failures=failures or None, idle_steps=idle or None) if failures or idle else None
        return LoopSettings(context_window=self.context_window, guard=guard)

    def extensions(self, workspace: Path, *, user_level: bool = False) -> Extensions:
        """`--agents`, `--skills`, `--mcp-config` (default: the workspace's `.mcp.json`, as Claude
        Code reads it; under `serve` the workspace is the operator's folder, never a user's),
        `--model-alias` and the permission rules (`--allow`, `--ask`, `--deny`); `user_level`: also
        `~/.claude`'s agents and skills (`delegate run` only; `CLAUDE_CONFIG_DIR` names another
        folder, as for Claude Code). A bad MCP config or rule is a `UserError`."""
        from .._config import Extensions
        from ..mcp import load_mcp_config
        from ..permissions import Permissions

        project = workspace / ".mcp.json"
        config = self.mcp_config or (project if project.is_file() else None)
        home = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude").expanduser()
        return Extensions(
            agents_dirs=self.agents or (),
            skills_dirs=self.skills or (),
            mcp_servers=load_mcp_config(config) if config else (),
            user_level=home if user_level and home.is_dir() else None,
            model_aliases=self.model_alias or (),
            model_prices=self.price or (),
            permissions=Permissions(allow=self.allow or (), ask=self.ask or (), deny=self.deny or ()),
            outputs=self.outputs,
        )

    def embedded_only(self, command: str) -> None:
        """Exit 2 when `--engine` (or `DELEGATE_ENGINE`) names Temporal for a `command` that runs
        only in this process: its work would run here while the operator reads it as on Temporal."""
        from ..engine import EngineSettings

        if EngineSettings.parse(self.engine).temporal:
            fail(
                f"`delegate {command}` runs in this process only, not on Temporal yet: run it without --engine "
                "(and DELEGATE_ENGINE unset); see docs/scale-out.md for what runs on Temporal"
            )

    def commands(self) -> CommandPolicy | None:
        """The command flags as a `CommandPolicy` (None without `--allow-commands`)."""
        if not self.allow_commands:
            return None
        return command_policy(self.allow_network, self.command_env, self.unsandboxed_commands, self.command_limit)

    def settings(
        self,
        workspace: Path,
        *,
        model: str | None = None,
        lead: Lead | None = None,
        limits: RunLimits | None = None,
        user_level: bool = False,
    ) -> RuntimeSettings:
        """The `RuntimeSettings` every command builds its runtimes from: these flags, and what the
        command itself says (`model`, `lead`, `limits`). Exit 2 for a workspace that is no folder;
        a `UserError` for a bad MCP config."""
        from .._config import RunLimits
        from ..agents import Lead
        from ..engine import EngineSettings
        from ..run import RuntimeSettings

        return RuntimeSettings(
            workspace=checked_workspace(workspace, create=True),
            model=model,
            lead=lead or Lead(),
            limits=limits or RunLimits(),
            loop=self.loop(),
            extensions=self.extensions(workspace, user_level=user_level),
            commands=self.commands(),
            engine=EngineSettings.parse(self.engine),
        )


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


def checked_workspace(workspace: Path, *, create: bool = False) -> Path:
    """The one workspace check of every command: exit 2 unless `--workspace` is a folder. A
    command that runs agents or writes (`create`) makes a missing one, as `Runtime` does, and says
    so on stderr; a command that only reads never does (a mistyped path is an error, not an empty
    folder)."""
    if create and not workspace.exists() and not workspace.is_symlink():
        workspace.mkdir(parents=True)
        typer.echo(f"note: created the workspace folder {str(workspace)!r}", err=True)
    if not workspace.is_dir():
        fail(f"workspace {str(workspace)!r} is not a folder: create it or pass --workspace DIR")
    return workspace


def command_policy(
    network: bool, env: list[str] | None, unsandboxed: bool, limits: list[str] | None = None
) -> CommandPolicy:
    """The command flags as a `CommandPolicy`; running commands unsandboxed is said out loud.

    Raises `UserError` for a `--command-limit` that is not `NAME=VALUE` of a known cap.
    """
    from ..workspace import CommandLimits, CommandPolicy

    caps = CommandLimits().with_settings(limits or [])
    from ..tools import SECRET_VARIABLES

    if withheld := sorted(set(env or ()) & SECRET_VARIABLES):
        typer.echo(
            f"warning: --command-env {', '.join(withheld)}: the runtime's own credentials (a provider's key, the "
            "database URL) never reach agents' commands; left out",
            err=True,
        )
    if unsandboxed:
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
    elif event.type == "warning" and event.agent_id == "lead" and "message" in event.data:
        typer.echo(f"warning: {event.data['message']}", err=True)


def print_waiting_calls(event: Event) -> None:
    """A call that waits for a person, on stderr as it starts waiting, with the command that decides
    it: what a run without a terminal to ask on (`--json`, a pipe) says instead of waiting silently."""
    if event.type == "approval.requested":
        print_waiting_call(event.run_id, event.data)


def print_waiting_call(run_id: str, data: Mapping[str, Any]) -> None:
    """What `print_waiting_calls` says of one call (`data`: its `approval.requested` event's, or
    its stored row's `to_dict()`)."""
    who = f"{data['agent_id']} ({data['subagent_type']})" if data.get("subagent_type") else data["agent_id"]
    rule = f" under the rule {data['rule']}" if data.get("rule") else ""
    typer.echo(
        f"waiting: call {data['call_id']} of {who} to {data['tool']}{rule} waits for a person: "
        f"`delegate runs approve {run_id} {data['call_id']}` (or `--deny --reason TEXT`)",
        err=True,
    )


def store_option(db: str | None) -> str | None:
    return db or os.environ.get("DELEGATE_DB") or None


def open_store(workspace: Path, db: str | None) -> Store:
    """The store of `--db`, `DELEGATE_DB`, or the workspace's own (a bad one is a `UserError`:
    exit 2, or its traceback with `--debug`)."""
    from ..run import open_store

    return open_store(store_option(db), checked_workspace(workspace, create=True))


def read_store(workspace: Path, db: str | None) -> Store | None:
    """The store a command that only reads looks in (as `open_store`), or None when the
    workspace has none yet: reading never creates `.delegate/` where it is run."""
    from ..run import open_store

    return open_store(store_option(db), checked_workspace(workspace), create=False)


def checked_text(text: str, what: str) -> str:
    """`text` from the command line, refused unless it is valid UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = ord(text[exc.start]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else f"character U+{ord(text[exc.start]):04X}"
        fail(f"{what} is not valid UTF-8 ({shown} at position {exc.start}): pass it as UTF-8 text")
    return text


COLLECTOR_THRESHOLDS = (50_000, 50, 50)
"""Python's collector thresholds in delegate's commands (the defaults are 2,000, 10, 10).

A run keeps each finished subagent reachable (its record, and its conversation for a follow-up),
and with the default thresholds the collector walks the whole heap more often the more of them
there are: a fan-out of 10,000 cost a subagent 1.47x what one of 1,000 did, all of it full
collections (`bench/bench_subagents.py` prints both ratios). With the start-up's objects frozen
and these thresholds it measured 0.97x. The library sets nothing global; the commands, being
applications, do (docs/subagents.md, "Fan-outs of thousands")."""


def tune_collector() -> None:
    """Freeze what start-up made (the collector never walks it again) and raise the collector's
    thresholds (`COLLECTOR_THRESHOLDS`): what `delegate run`, `chat`, `serve` and `batch` do
    before their work starts."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def run_until_done(start: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run `start()` on a new event loop, SIGTERM and SIGHUP cancelling it as Ctrl-C does (the
    run records itself cancelled); raises `KeyboardInterrupt` when it was cancelled so. The
    process's collector is tuned first (`tune_collector`)."""

    async def main() -> _T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, task.cancel)
        return await start()

    tune_collector()
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
