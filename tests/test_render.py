"""The live tree folds a run's events into one line per agent."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from delegate import Runtime
from delegate.cli._render import RunView
from delegate.testing import FunctionModel, call, is_lead, reply


async def test_the_tree_shows_each_subagent_with_status_steps_and_tokens(tmp_path: Path) -> None:
    def answer(request):  # type: ignore[no-untyped-def]
        if is_lead(request):
            if len(request.messages) == 1:
                return call("task", subagent_type="explore", description="look around", prompts=["a", "b"])
            return reply("done")
        if request.messages[0].text == "b":
            raise RuntimeError("model down")
        return call("complete", summary="found")

    view = RunView()
    await Runtime(model=FunctionModel(answer), workspace=tmp_path, store=False, sinks=[view]).run("go")
    console = Console(width=120, record=True)
    console.print(view.render())
    text = console.export_text()
    lines = text.splitlines()
    assert lines[0].startswith("completed lead") and "2 steps · 30 tokens" in lines[0]
    assert "completed explore: look around [1/2]  1 step · 15 tokens" in text
    assert "error     explore: look around [2/2]  0 steps · 0 tokens" in text and "model down" in text
