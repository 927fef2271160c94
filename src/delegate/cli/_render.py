"""The live view of a run on a terminal: the lead and a tree of its subagents."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from .._events import Event, EventSink
from .._text import plural, safe_text
from .._usage import cost_text, usage_line

if TYPE_CHECKING:
    from rich.markdown import Markdown

    from ..run import RunResult

_STYLE = {
    "running": "yellow",
    "waiting": "bold magenta",
    "completed": "green",
    "error": "red",
    "timed_out": "red",
    "aborted": "magenta",
    "cancelled": "dim",
}


@dataclass
class _Agent:
    label: str
    status: str = "running"
    steps: int = 0
    tokens: int = 0
    cost: float | None = 0.0
    """US dollars spent so far (None: a request on a model without a price)."""
    activity: str = ""
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    messages: int = 0
    """Follow-ups it took (`task_message`)."""
    todos: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    """Its todo list as it last wrote it (`todo_write`)."""
    parent: str | None = None
    """The subagent that started it, when one did (a nested subagent: under its parent's line)."""


class RunView:
    """Folds events into what the tree shows. Knows nothing of the terminal."""

    def __init__(self) -> None:
        self.lead = _Agent("lead")
        self.subagents: dict[str, _Agent] = {}
        self.phases: dict[str, list[str]] = {}
        """A workflow's phases in the order they began, each with its agents' ids."""

    def __call__(self, event: Event) -> None:
        agent = self.lead if event.agent_id == "lead" else self.subagents.get(event.agent_id)
        data = event.data
        match event.type:
            case "subagent.started":
                label = f"{data['type']}: {data['description']}"
                label += " (background)" if data.get("background") else ""
                parent = event.parent_agent_id if event.parent_agent_id in self.subagents else None
                self.subagents[event.agent_id] = _Agent(label, parent=parent)
                if data.get("phase"):
                    self.phases.setdefault(str(data["phase"]), []).append(event.agent_id)
            case "workflow.phase":
                self.phases.setdefault(str(data.get("name")), [])
            case "subagent.message" if agent is not None:
                agent.status, agent.ended = "running", None
                agent.messages = int(data.get("messages") or agent.messages + 1)
                agent.activity = f"follow-up {agent.messages}"
            case "subagent.completed" if agent is not None:
                agent.status = str(data["status"])
                agent.steps = int(data["steps"])
                agent.messages = int(data.get("messages") or 0)
                agent.tokens = _tokens(data["usage"])
                agent.cost = _cost(data["usage"])
                agent.ended = time.monotonic()
                agent.activity = str(data.get("error") or ", ".join(data.get("artifacts") or []))
            case "model.response" if agent is not None:
                agent.steps = int(data["step"])
                agent.tokens += _tokens(data["usage"])
                cost = _cost(data["usage"])
                agent.cost = None if agent.cost is None or cost is None else agent.cost + cost
                agent.activity = "calling " + ", ".join(data["tool_calls"]) if data["tool_calls"] else "answering"
            case "tool.started" if agent is not None:
                agent.activity = f"{data['name']}"
            case "approval.requested" if agent is not None:
                agent.status, agent.activity = "waiting", f"waiting for approval: {data['tool']}"
            case "approval.decided" if agent is not None:
                agent.status, agent.activity = "running", f"{data['tool']} {data['decision']}d"
            case "todo.updated" if agent is not None:
                agent.todos = list(data.get("todos") or [])
            case "run.completed":
                self.lead.status = str(data["status"])
                self.lead.ended = time.monotonic()
            case _:
                pass

    def render(self) -> Tree:
        tree = Tree(_line(self.lead))
        _add_todos(tree, self.lead)
        grouped = {agent_id for ids in self.phases.values() for agent_id in ids}
        nodes: dict[str, Tree] = {}
        for agent_id, agent in self.subagents.items():  # a parent starts before its children
            if agent_id not in grouped:
                above = nodes.get(agent.parent) if agent.parent is not None else None
                nodes[agent_id] = (above or tree).add(_line(agent))
                _add_todos(nodes[agent_id], agent)
        for name, ids in self.phases.items():
            agents = [self.subagents[i] for i in ids]
            node = tree.add(_phase_line(name, agents))
            shown = agents if len(agents) <= PHASE_SHOWN else [a for a in agents if a.status != "completed"]
            for agent in shown[:PHASE_SHOWN]:
                _add_todos(node.add(_line(agent)), agent)
            if len(agents) > len(shown[:PHASE_SHOWN]):
                node.add(Text(f"... {len(agents) - len(shown[:PHASE_SHOWN])} more", style="dim"))
        return tree


PHASE_SHOWN = 12
"""The most agents of one workflow phase the tree lists (past it: those not completed, then a count)."""


def _phase_line(name: str, agents: list[_Agent]) -> Text:
    """A workflow phase: its name and its agents counted by status ("phase review · 8 agents: 5
    completed, 3 running")."""
    counts: dict[str, int] = {}
    for agent in agents:
        counts[agent.status] = counts.get(agent.status, 0) + 1
    text = Text()
    text.append("phase ", style="dim")
    text.append(name, style="bold")
    said = ", ".join(f"{n} {status}" for status, n in counts.items())
    text.append(f"  {plural(len(agents), 'agent')}" + (f": {said}" if said else ""), style="dim")
    return text


_MARKS = {"completed": ("[x]", "dim"), "in_progress": ("[>]", "bold yellow"), "pending": ("[ ]", "")}
TODOS_SHOWN = 8
"""The most todos of one agent the tree shows (those in progress and next; a count of the rest)."""


def _add_todos(node: Tree, agent: _Agent) -> None:
    """An agent's todo list under its line, in progress and pending first once it is long."""
    todos = agent.todos
    if len(todos) > TODOS_SHOWN:
        todos = sorted(todos, key=lambda t: t.get("status") == "completed")
    for todo in todos[:TODOS_SHOWN]:
        mark, style = _MARKS.get(str(todo.get("status")), ("[ ]", ""))
        node.add(Text(f"{mark} {str(todo.get('content', ''))[:80]}", style=style))
    if len(todos) > TODOS_SHOWN:
        node.add(Text(f"... {len(todos) - TODOS_SHOWN} more todos", style="dim"))


def _tokens(usage: object) -> int:
    if isinstance(usage, dict):
        return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))  # type: ignore[arg-type]
    return 0


def _cost(usage: object) -> float | None:
    if isinstance(usage, dict):
        cost = usage.get("cost_usd", 0.0)  # type: ignore[union-attr]
        return float(cost) if isinstance(cost, (int, float)) else None
    return 0.0


def _line(agent: _Agent) -> Text:
    elapsed = (agent.ended or time.monotonic()) - agent.started
    text = Text()
    text.append(f"{agent.status:<9} ", style=_STYLE.get(agent.status, ""))
    text.append(agent.label, style="bold")
    cost = f" · {cost_text(agent.cost)}" if agent.cost else ""  # shown once known and not nothing
    follow_ups = f" · {plural(agent.messages, 'follow-up')}" if agent.messages else ""
    spent = f"{plural(agent.steps, 'step')} · {plural(agent.tokens, 'token')}{cost}{follow_ups}"
    text.append(f"  {spent} · {elapsed:.1f}s", style="dim")
    if agent.activity:
        text.append(f"  {agent.activity[:60]}", style="cyan")
    return text


def ending_line(result: RunResult) -> str | None:
    """What to say under the answer when the lead did not simply answer: how it ended (status and
    stop reason) and what the loop said, e.g. "No final answer: the lead ended aborted (max_steps):
    reached the step limit (4)." None when it completed with an answer."""
    answered = bool(result.final.strip())
    if result.status == "completed" and answered:
        return None
    said = f": {safe_text(result.error)}" if result.error else ""
    empty = " with an empty answer" if result.status == "completed" else ""
    opening = "The lead" if answered else "No final answer: the lead"
    return f"{opening} ended {result.status} ({result.stop_reason}){empty}{said}."


def answer_view(text: str) -> Markdown:
    """A final answer as a terminal shows it: its Markdown rendered (headings, lists, code, links).
    rich's Markdown (markdown-it, 0.3-0.5 s) is imported here, on a terminal only: a piped
    `delegate run` never renders one."""
    from rich.markdown import Markdown

    return Markdown(safe_text(text))


def print_answer(text: str) -> None:
    """Print a final answer: rendered as Markdown on a terminal, as it is (plain) when piped."""
    if sys.stdout.isatty():
        Console().print(answer_view(text))
    else:
        typer.echo(safe_text(text))


def run_live(
    start: Callable[[list[EventSink]], Coroutine[Any, Any, RunResult]],
    ask: Callable[[Console, Event], Awaitable[None]] | None = None,
    *,
    console: Console | None = None,
    transient: bool = False,
) -> RunResult:
    """Run `start(sinks)` with the live tree on the terminal, then print the final answer and the
    usage. A call that waits for a person is put to them with `ask`, the tree paused meanwhile.
    `transient`: the live tree is printed once more when the run ends (`delegate chat`, whose
    terminal scrolls on), instead of staying where it was drawn."""
    from ._common import run_until_done

    console = console or Console()
    view = RunView()
    asked: list[Event] = []

    def waits(event: Event) -> None:
        if event.type == "approval.requested":
            asked.append(event)

    async def go() -> RunResult:
        with Live(view.render(), console=console, refresh_per_second=8, transient=transient) as live:
            task = asyncio.create_task(start([view, waits]))
            try:
                while not task.done():
                    if asked and ask is not None:
                        live.stop()
                        try:
                            await ask(console, asked.pop(0))
                        finally:
                            live.start()
                    live.update(view.render())
                    await asyncio.wait({task}, timeout=0.125)
            except asyncio.CancelledError:
                task.cancel()
                await asyncio.wait({task})
                raise
            live.update(view.render())
            return task.result()

    result = run_until_done(go)
    console.print(view.render() if transient else "")
    if result.final.strip():
        console.print(Group(Text("Final answer", style="bold"), answer_view(result.final)))
    ending = ending_line(result)
    if ending is not None:
        console.print(Text(ending, style="bold red"))
    usage = result.usage
    console.print(
        Text(
            f"usage: {usage_line(usage)} ({plural(len(result.subagents), 'subagent')}) · run {result.run_id}",
            style="dim",
        )
    )
    return result
