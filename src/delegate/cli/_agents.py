"""`delegate agents list` and `delegate agents show NAME`: the subagent catalogue as a run sees it,
with every warning about the definition and skill files it read printed on stderr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ._common import Agents, ModelAlias, OperatorFlags, Skills, Workspace, fail, print_warnings

if TYPE_CHECKING:
    from ..agents import Subagent
    from ..run import Runtime

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


agents_app = typer.Typer(help="The subagent catalogue.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(agents_app, name="agents")


def _runtime(
    workspace: Path, agents: list[Path] | None, skills: list[Path] | None, aliases: list[str] | None, *, warn: bool
) -> Runtime:
    from .._errors import UserError

    try:
        flags = OperatorFlags(agents=agents, skills=skills, model_alias=aliases)
        settings = flags.settings(workspace, user_level=True)  # the catalogue as `delegate run` sees it
        runtime = settings.build(store=False)
        if warn:
            print_warnings(runtime)
    except UserError as exc:
        fail(str(exc))
    return runtime


def runs_on(definition: Subagent) -> str:
    """The model a type runs on, as people read it: `sonnet → anthropic:...`, and the fallback."""
    from ..models import credentials_hint, has_credentials

    row = definition.to_dict()
    model = str(row["model"])
    shown = f"{row['written_model']} → {model}" if row["written_model"] else model
    if definition.model_fallback and not has_credentials(model):
        shown += f" (no {credentials_hint(model)}: runs on the lead's model)"
    elif model == "inherit":
        shown = f"{row['written_model']} → inherit" if row["written_model"] else "inherit (the lead's model)"
    return shown


@agents_app.command("list")
def agents_list(
    workspace: Workspace = Path("."),
    agents: Agents = None,
    skills: Skills = None,
    model_alias: ModelAlias = None,
    as_json: AsJson = False,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="A table: description, tools, model and source of each type.")
    ] = False,
) -> None:
    """Show the subagent catalogue, one line per type (--long: a table of each type's tools, model
    and source). Warnings go to stderr."""
    runtime = _runtime(workspace, agents, skills, model_alias, warn=True)
    definitions = list(runtime.catalogue.definitions.values())
    if as_json:
        typer.echo(json.dumps([d.to_dict() for d in definitions], ensure_ascii=False))
        return
    if not long:
        from ..subagents import first_sentence

        width = max((len(d.name) for d in definitions), default=0)
        for d in definitions:
            typer.echo(f"{d.name:<{width}}  {_short(first_sentence(d.description), 100)}")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "description", "tools", "model", "source")
    for d in definitions:
        names = d.tool_names
        tools = "inherit" if names is None else ", ".join(names)
        if d.unavailable_tools:
            tools += f" (not served: {', '.join(d.unavailable_tools)})"
        table.add_row(d.name, _short(d.description), tools, runs_on(d), d.source)
    Console().print(table)


@agents_app.command("show")
def agents_show(
    name: Annotated[str, typer.Argument(help="The subagent type.")],
    workspace: Workspace = Path("."),
    agents: Agents = None,
    skills: Skills = None,
    model_alias: ModelAlias = None,
    as_json: AsJson = False,
) -> None:
    """Print one definition as resolved: source file, mapped tools, model, limits, its warnings."""
    runtime = _runtime(workspace, agents, skills, model_alias, warn=False)
    definition = runtime.catalogue.get(name)
    if definition is None:
        fail(f"no subagent type {name!r}; available: {', '.join(runtime.catalogue.names())}")
    row = definition.to_dict() | {
        "runs_on": runs_on(definition),
        "permissions": type_rules(runtime, definition),
        "instructions": definition.instructions,
    }
    if as_json:
        typer.echo(json.dumps(row, ensure_ascii=False))
        return
    for label, value in _lines(row):
        typer.echo(f"{label + ':':<19}{value}")
    if definition.instructions:
        typer.echo("\n" + definition.instructions)


def _lines(row: dict[str, Any]) -> list[tuple[str, str]]:
    def listed(value: Any) -> str:
        return ", ".join(value) if value else "none"

    lines = [
        ("name", row["name"]),
        ("source", row["source"]),
        ("description", row["description"]),
        ("tools", "inherit (the lead's, less task)" if row["tools"] is None else listed(row["tools"])),
        ("disallowed tools", listed(row["disallowed_tools"])),
        ("not served", listed(row["unavailable_tools"])),
        ("model", row["runs_on"]),
        ("max steps", str(row["max_steps"])),
        ("timeout", "none" if row["timeout"] is None else f"{row['timeout']:g} s"),
        ("token budget", "none" if row["token_budget"] is None else str(row["token_budget"])),
        ("skills", "all" if row["skills"] is None else listed(row["skills"])),
        ("mcp servers", listed(row["mcp_servers"])),
        ("permission mode", row["permission_mode"] or "default"),
        ("project context", "yes" if row["project_context"] else "no"),
    ]
    rules = row["command_rules"]
    if rules["allow"]:
        lines.append(("commands allowed", ", ".join(rules["allow"])))
    if rules["deny"]:
        lines.append(("commands refused", ", ".join(rules["deny"])))
    permissions = row["permissions"]
    for kind in ("allow", "ask", "deny"):
        if permissions[kind]:
            lines.append((f"rules {kind}", ", ".join(permissions[kind])))
    if permissions["withheld"]:
        lines.append(("tools withheld", ", ".join(permissions["withheld"])))
    if row["extra"]:
        lines.append(("other fields", ", ".join(f"{k}={v!r}" for k, v in row["extra"].items())))
    lines += [
        ("warning", f"{w['file']}{':' + str(w['line']) if w['line'] else ''}: {w['reason']}") for w in row["warnings"]
    ]
    return lines


def type_rules(runtime: Runtime, definition: Subagent) -> dict[str, Any]:
    """The permission rules that apply to `definition`'s subagents (the run's, from the settings
    files and flags, under its permission mode), and the tools they withhold from it."""
    from ..agents import tools_for

    policy = runtime.gates.policy.for_mode(definition.permission_mode)
    rules = policy.permissions
    names = tools_for(definition, list(runtime.tools), list(runtime.tools))
    return {
        "mode": policy.mode,
        "allow": list(rules.allow),
        "ask": list(rules.ask),
        "deny": list(rules.deny),
        "withheld": [n for n in names if not policy.offered(n)],
    }


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
