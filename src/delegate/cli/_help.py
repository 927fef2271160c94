"""Help a person reads, as `gh` and `llm` show it: each value named for what it is (`TEXT`, `N`,
`SECONDS`, `DIR`, `RUN_ID`) rather than typer's Python types (`<str>`, `<int range> [x>=1]`,
`<list[str]>`, `{run_id}`), flags with no value shown, bounds in words, and an example on every
command (`EXAMPLES`, checked by the tests to name real flags).

`readable(command)` is applied once to the command tree `main` builds, before it parses anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import typer
from typer.core import TyperArgument, TyperOption

EXAMPLES: dict[str, str] = {
    "version": "delegate version",
    "run": 'delegate run "Summarise docs/*.md into SUMMARY.md" --model openai:gpt-4.1-mini --workspace ./ws',
    "serve": "delegate serve --port 8765 --model openai:gpt-4.1-mini",
    "demo": "delegate demo --model openai:gpt-4.1-mini",
    "chat": "delegate chat --model openai:gpt-4.1-mini",
    "users add": "delegate users add alice",
    "users list": "delegate users list --json",
    "users revoke": "delegate users revoke alice",
    "users token": "delegate users token alice",
    "agents list": "delegate agents list --long",
    "agents show": "delegate agents show explore",
    "batch submit": "delegate batch submit items.jsonl --type explore --max-running 8",
    "batch list": "delegate batch list --user alice",
    "batch status": "delegate batch status BATCH_ID --json",
    "batch items": "delegate batch items BATCH_ID --status failed",
    "batch pause": "delegate batch pause BATCH_ID",
    "batch resume": "delegate batch resume BATCH_ID",
    "batch cancel": "delegate batch cancel BATCH_ID",
    "batch retry": "delegate batch retry BATCH_ID --key item-7",
    "batch export": "delegate batch export BATCH_ID -o results.jsonl",
    "batch worker": "delegate batch worker --db postgresql://localhost/delegate",
    "runs list": "delegate runs list --status interrupted",
    "runs show": "delegate runs show RUN_ID --json",
    "runs events": "delegate runs events RUN_ID --follow",
    "runs export": "delegate runs export RUN_ID > run.json",
    "runs cancel": "delegate runs cancel RUN_ID",
    "runs stop": "delegate runs stop RUN_ID sub2 --reason 'off track'",
    "runs approve": "delegate runs approve RUN_ID --all",
    "worker": "delegate worker --engine temporal://127.0.0.1:7233 --concurrency 50",
    "workflow run": "delegate workflow run map-review-merge --arg 'pattern=docs/*.md' --model openai:gpt-4.1-mini",
    "workflow list": "delegate workflow list",
    "memory list": "delegate memory list --agent explore --limit 20",
    "memory show": "delegate memory show 12 --json",
    "memory search": 'delegate memory search "release checklist"',
    "memory add": 'delegate memory add "Tests run with bash scripts/test.sh"',
    "memory forget": "delegate memory forget 12 13",
    "skills list": "delegate skills list --user alice",
    "skills enable": "delegate skills enable pdf --user alice",
    "skills disable": "delegate skills disable pdf",
    "eval run": "delegate eval run suite/ --arm single --arm delegation --repeat 3 --html report.html",
    "eval resume": "delegate eval resume EVAL_ID",
    "eval show": "delegate eval show EVAL_ID --json",
    "eval list": "delegate eval list",
    "eval compare": "delegate eval compare single delegation",
}
"""One example per command, by its path below `delegate`."""

HELP_NAMES = ["-h", "--help"]
"""What shows help on every command (as `gh` and `llm` do)."""
_DIRS = {"workspace", "agents", "skills"}
_SECONDS = ("timeout", "idle", "interval")


class _Argument(TyperArgument):
    """An argument shown by its name alone: `RUN_ID`, `[RUN_ID]` when it may be left out."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw
        return [(name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")]


class _Option(TyperOption):
    """An option whose value is named for what it is, a flag shown bare, bounds in words."""

    def _get_number_range_help_str(self) -> str | None:
        low, high = self.min, self.max
        if low is None and high is None:
            return None
        if high is None:
            return f"at least {low:g}"
        return f"{low:g} to {high:g}" if low is not None else f"at most {high:g}"


def readable(command: Any, path: str = "") -> None:
    """Name every parameter of `command` and its subcommands as people read it, and give each
    command its example (see the module's docstring)."""
    subcommands: dict[str, Any] = getattr(command, "commands", None) or {}
    for name, sub in subcommands.items():
        readable(sub, f"{path} {name}".strip())
    if path in EXAMPLES:
        command.epilog = f"Example: {EXAMPLES[path]}"
    # `-h`/`--help`, made (and kept) by the command on first use: made here, to be named as the rest
    help_option = command.get_help_option(typer.Context(command, help_option_names=HELP_NAMES))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if isinstance(param, TyperArgument):
            param.__class__ = _Argument  # the help's presentation only: parsing is the base class's
            if param.metavar is None:
                param.metavar = (param.name or "value").upper()
        elif isinstance(param, TyperOption):
            param.__class__ = _Option
            if param.metavar is None:
                param.metavar = "" if param.is_flag else _metavar(param)


def _metavar(option: TyperOption) -> str:
    name = option.name or ""
    annotation = option.type_descriptor.annotation
    if option.type_descriptor.is_list:
        annotation = (*get_args(annotation), str)[0]
    if annotation is int:
        return "N"
    if annotation is float:
        return "SECONDS" if any(word in name for word in _SECONDS) else "NUMBER"
    if annotation is Path:
        return "DIR" if name in _DIRS else "FILE"
    if name in ("model", "subagent_model"):
        return "PROVIDER:MODEL"
    return "TEXT"


def build() -> Any:
    """The command tree of `delegate`, every face registered, made readable."""
    from . import _agents, _batch, _chat, _demo, _eval, _memory, _runs, _serve, _worker
    from ._main import app

    for face in (_agents, _batch, _serve, _demo, _runs, _chat, _worker, _memory, _eval):
        face.register(app)
    command = typer.main.get_command(app)
    readable(command)
    return command


__all__ = ["EXAMPLES", "build", "readable"]
