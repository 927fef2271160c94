"""`delegate chat`: a thread with the lead, one turn after another, from the shell.

On a terminal it is an interactive session: a prompt reads what to ask (a line ending in `\\`
goes on on the next line, and lines between two `\"\"\"` lines are one prompt; the arrow keys walk
the history, kept in `<workspace>/.delegate/chat_history`), the live tree shows the lead and its
subagents while it works, and the answer is printed as Markdown. Ctrl-C cancels the running turn
(it is recorded `cancelled`, and the next turn continues from it) or clears the line being typed;
Ctrl-D (or `/exit`) leaves. `/usage` shows what each turn and the whole thread spent, `/agents` the
subagent types the lead can start and the subagents of the last turn.

Off a terminal (stdin a pipe or a file), or with `--json`, each line of stdin is one prompt, and
each answer is printed as one JSON object (what `delegate run --json` prints), a line each.

Each turn is a run of its own (events, records, usage, resume, cancel, as `delegate run`'s) that
continues the one before; `--continue RUN_ID` (or `--continue` alone: this workspace's latest run)
goes on with an existing thread.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .._text import plural, safe_json, safe_text
from .._usage import Usage
from ._common import (
    Db,
    OperatorFlags,
    Workspace,
    default_model,
    fail,
    operator_flags,
    print_run_warnings,
    print_waiting_calls,
    print_warnings,
    run_until_done,
    store_option,
)

if TYPE_CHECKING:
    from rich.console import Console

    from .._events import EventSink
    from ..run import RunResult, Runtime

COMMANDS = {
    "/usage": "what each turn and the whole thread spent",
    "/agents": "the subagent types the lead can start, and the subagents of the last turn",
    "/help": "these commands",
    "/exit": "leave (Ctrl-D too)",
}
FENCE = '"""'
HISTORY_FILE = "chat_history"


ContinueId = Annotated[
    str | None,
    typer.Argument(
        metavar="RUN_ID", help="With --continue: the run to continue (default: the latest).", show_default=False
    ),
]
Continue = Annotated[
    bool,
    typer.Option("--continue", help="Continue a thread: RUN_ID's (default: this workspace's latest run)."),
]


def check_continue(continue_thread: bool, run_id: str | None, resume: str | None = None) -> None:
    """Bad usage of `--continue [RUN_ID]` fails here, before anything is built."""
    if run_id is not None and not continue_thread:
        fail(f"what is {run_id!r}? a RUN_ID goes with --continue: `... --continue RUN_ID`")
    if continue_thread and resume is not None:
        fail("--continue starts a new run of a thread and --resume goes on with an interrupted run: give one of them")


RUN_ID = re.compile(r"run_[0-9a-f]{12}")
"""The shape of a run id delegate makes (`run_` and 12 hex digits)."""


def continue_order(continue_thread: bool, prompt: str | None, run_id: str | None) -> tuple[str | None, str | None]:
    """`(prompt, run_id)` as the user meant them: `run --continue RUN_ID PROMPT` hands the run id
    to PROMPT and the prompt to RUN_ID (options take no value here, arguments go in order), so
    a PROMPT shaped as a run id given with a RUN_ID that is not one are put back in their places."""
    if (
        continue_thread
        and prompt is not None
        and run_id is not None
        and RUN_ID.fullmatch(prompt)
        and not RUN_ID.fullmatch(run_id)
    ):
        return run_id, prompt
    return prompt, run_id


def continued_run(runtime: Runtime, continue_thread: bool, run_id: str | None) -> str | None:
    """The run a `--continue` continues: `run_id`, else the latest run of the runtime's workspace
    (None without `--continue`)."""
    if not continue_thread or run_id is not None:
        return run_id
    store = runtime.store
    latest = store.latest_run(runtime.user_id, str(runtime.workspace.root)) if store is not None else None
    if latest is None:
        fail("there is no run in this workspace to continue: start one with `delegate run PROMPT` or `delegate chat`")
    return latest.id


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)


@operator_flags
def chat(
    run_id: ContinueId = None,
    continue_thread: Continue = False,
    model: Annotated[str | None, typer.Option("--model", "-m", help="provider:name, e.g. openai:gpt-4.1-mini")] = None,
    workspace: Workspace = Path("."),
    max_steps: Annotated[int, typer.Option("--max-steps", min=1, help="Step limit of the lead, each turn.")] = 50,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0.001, help="Seconds each turn may take (default: 3600).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Read one prompt a line from stdin; print one JSON object per answer.")
    ] = False,
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Talk with the lead agent: each prompt a turn of one thread (`--continue [RUN_ID]` goes on with one)."""
    check_continue(continue_thread, run_id)
    flags.embedded_only("chat")
    from .._config import DEFAULT_RUN_TIMEOUT, RunLimits
    from ..agents import Lead

    model = default_model(model, what="turns")
    limits = RunLimits(timeout=DEFAULT_RUN_TIMEOUT if timeout is None else timeout)
    settings = flags.settings(workspace, model=model, lead=Lead(max_steps=max_steps), limits=limits)
    runtime = settings.build(store=store_option(db))
    runtime.model  # noqa: B018 - resolve now: a bad provider or a missing key is bad usage
    if runtime.store is None:
        fail("a chat keeps its thread in the store: drop the option that turns it off")
    last = continued_run(runtime, continue_thread, run_id)
    if last is not None:
        _check_continuable(runtime, last)
    print_warnings(runtime)
    runtime.sinks.append(print_run_warnings)
    session = Session(runtime, last)
    if as_json or not sys.stdin.isatty():
        runtime.sinks.append(print_waiting_calls)  # on a terminal each call is asked inline
        raise typer.Exit(session.lines(sys.stdin))
    session.interactive()


def _check_continuable(runtime: Runtime, run_id: str) -> None:
    from .._store import why_not_continuable

    assert runtime.store is not None
    run = runtime.store.get_run(run_id, runtime.user_id)
    if run is None:
        fail(f"no run {run_id!r} to continue: list the runs with `delegate runs list`")
    why = why_not_continuable(run)
    if why is not None:
        fail(why)


class Session:
    """A chat's thread: the turns sent so far, each continuing the one before."""

    def __init__(self, runtime: Runtime, last: str | None) -> None:
        self.runtime = runtime
        self.last = last
        """The run the next turn continues (None: the next turn starts the thread)."""
        self.results: list[RunResult] = []

    async def _turn(self, prompt: str, sinks: list[EventSink], run_id: str | None = None) -> RunResult:
        try:
            return await self.runtime.run(prompt, run_id=run_id, sinks=sinks, continue_from=self.last)
        finally:
            await self.runtime.aclose()  # each turn has an event loop of its own

    def _ended(self, result: RunResult) -> None:
        self.results.append(result)
        self.last = result.run_id

    # -- one prompt a line ------------------------------------------------------------------

    def lines(self, stream: Iterator[str]) -> int:
        """Answer each non-empty line of `stream` as a turn, printing each result as one JSON
        line; the exit code: 0 if the last turn completed, else 1."""
        from .._errors import UserError

        code = 0
        for line in stream:
            prompt = line.strip()
            if not prompt:
                continue
            try:
                result = run_until_done(lambda p=prompt: self._turn(p, []))
            except UserError as exc:
                fail(str(exc))
            except KeyboardInterrupt:
                return 130
            self._ended(result)
            typer.echo(json.dumps(safe_json(result.to_dict()), ensure_ascii=False))
            sys.stdout.flush()
            code = 0 if result.status == "completed" else 1
        return code

    # -- on a terminal ----------------------------------------------------------------------

    def interactive(self) -> None:
        from rich.console import Console
        from rich.markup import escape

        console = Console()
        store_dir = self.runtime.workspace.root / ".delegate"
        with _history(store_dir / HISTORY_FILE):
            where = f"continuing run {self.last}" if self.last else "a new thread"
            console.print(
                f"[bold]delegate chat[/bold] · {where} · {escape(str(self.runtime.workspace.root))}\n"
                f"[dim]End a line with \\ to go on, or wrap lines in {FENCE}. Ctrl-C cancels a turn; "
                "Ctrl-D or /exit leaves; /help lists the commands.[/dim]"
            )
            while True:
                try:
                    prompt = _read_prompt()
                except KeyboardInterrupt:
                    console.print()
                    continue
                except EOFError:
                    console.print()
                    return
                if not prompt.strip():
                    continue
                if prompt.strip().startswith("/"):
                    if self._command(prompt.strip(), console):
                        return
                    continue
                self._live_turn(prompt, console)

    def _command(self, line: str, console: Console) -> bool:
        from rich.markup import escape

        """Do a `/command`; True to leave."""
        name = line.split()[0].lower()
        if name in ("/exit", "/quit"):
            return True
        if name == "/usage":
            self._usage(console)
        elif name == "/agents":
            self._agents(console)
        elif name == "/help":
            for command, what in COMMANDS.items():
                console.print(f"  [bold]{command}[/bold]  {what}")
        else:
            console.print(f"[red]unknown command {escape(name)}[/red]: {', '.join(COMMANDS)}")
        return False

    def _live_turn(self, prompt: str, console: Console) -> None:
        """One turn with the live tree (a call that waits for a person is asked inline, as
        `delegate run` asks), then its answer as Markdown and its usage."""
        from rich.markup import escape

        from .._errors import UserError
        from ._approve import ask_inline
        from ._render import run_live

        run_id = f"run_{uuid.uuid4().hex[:12]}"
        try:
            result = run_live(
                lambda sinks: self._turn(prompt, sinks, run_id),
                ask_inline(self.runtime),
                console=console,
                transient=True,
            )
        except UserError as exc:
            console.print(f"[red]error:[/red] {escape(safe_text(str(exc)))}")
            return
        except KeyboardInterrupt:
            self._after_cancel(run_id, console)
            return
        self._ended(result)

    def _after_cancel(self, run_id: str, console: Console) -> None:
        """The turn Ctrl-C cancelled is recorded `cancelled` (if it had started): the next turn
        continues from it."""
        from ..run import stored_result

        store = self.runtime.store
        result = stored_result(store, run_id) if store is not None else None
        if result is None:
            console.print("[yellow]cancelled[/yellow] before it started: ask again, or Ctrl-D to leave")
            return
        self._ended(result)
        console.print(f"[yellow]cancelled[/yellow] · run {run_id}: ask again, or Ctrl-D to leave")

    def _usage(self, console: Console) -> None:
        from rich.table import Table

        store = self.runtime.store
        if self.last is None or store is None:
            console.print("No turn yet.")
            return
        last = store.get_run(self.last)
        assert last is not None
        runs = store.thread_runs(last.thread_id or last.id)
        table = Table(
            "run", "status", "input tokens", "output tokens", "cost", "prompt", title=f"thread {last.thread_id}"
        )
        for run in runs:
            u = run.usage
            table.add_row(run.id, run.status, f"{u.input_tokens:,}", f"{u.output_tokens:,}", _cost(u), run.prompt[:50])
        total = sum((r.usage for r in runs), Usage())
        turns = plural(len(runs), "turn")
        cost = _cost(total)
        table.add_row("thread", turns, f"{total.input_tokens:,}", f"{total.output_tokens:,}", cost, "", style="bold")
        console.print(table)

    def _agents(self, console: Console) -> None:
        from rich.markup import escape

        catalogue = self.runtime.catalogue.visible(allow_commands=self.runtime.workspace.allow_commands)
        console.print("[bold]Subagent types[/bold]")
        for definition in catalogue.definitions.values():
            console.print(f"  [bold]{escape(definition.name)}[/bold]  {escape(definition.description[:100])}")
        if self.results:
            console.print(f"[bold]Subagents of run {self.results[-1].run_id}[/bold]")
            for sub in self.results[-1].subagents or []:
                tokens = sub.usage.input_tokens + sub.usage.output_tokens
                line = f"  {sub.id} [{sub.status}] {sub.type}: {sub.description} · {tokens:,} tokens"
                console.print(escape(safe_text(line)))
            if not self.results[-1].subagents:
                console.print("  none: the lead answered itself")


def _cost(usage: Usage) -> str:
    """US dollars, or `?` when a request's price is unknown (the model has none in the table)."""
    return "?" if usage.cost_usd is None else f"${usage.cost_usd:.4f}"


def _read_prompt(read: Callable[[str], str] = input) -> str:
    """One prompt: a line; a line ending in `\\` goes on on the next; lines between two `\"\"\"`
    lines are taken whole."""
    first = read("> ")
    if first.strip() == FENCE:
        lines: list[str] = []
        while (line := read("… ")).strip() != FENCE:
            lines.append(line)
        return "\n".join(lines)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        lines.append(read("… "))
    return "\n".join(lines)


@contextlib.contextmanager
def _history(path: Path) -> Generator[None]:
    """Line editing and a history kept across chats (when the `readline` module is there)."""
    try:
        import readline
    except ImportError:  # not on every platform: plain input then
        yield
        return
    with contextlib.suppress(OSError):
        readline.read_history_file(path)
    readline.set_history_length(1000)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)
