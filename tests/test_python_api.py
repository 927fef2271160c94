"""The Python API a peer's user expects: one lead definition, typed results, tools given as
functions on the lead and on a subagent alike, settings objects passed whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from delegate import Event, Extensions, Lead, LoopSettings, RunLimits, Runtime, Subagent, UserError, tool
from delegate.models import ModelRequest, ModelResponse
from delegate.subagents import LEAD_INSTRUCTIONS
from delegate.testing import FunctionModel, call, reply

from .cli_support import run_cli


class Price(BaseModel):
    item: str
    euros: float


def is_lead(request: ModelRequest) -> bool:
    return request.system.startswith(LEAD_INSTRUCTIONS)


async def test_a_lead_with_an_output_schema_returns_its_result_validated_as_that_model(tmp_path: Path) -> None:
    tries: list[str] = []

    def answer(request: ModelRequest) -> ModelResponse:
        tries.append(request.messages[-1].role)
        if len(tries) == 1:  # a wrong shape first: it is told what is wrong and tries again
            return call("complete", summary="priced", result={"item": "tea"})
        return call("complete", summary="priced", result={"item": "tea", "euros": 2.5})

    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, lead=Lead(output_schema=Price), store=False)
    result = await rt.run("Price the tea.")
    assert result.status == "completed"
    assert result.result == Price(item="tea", euros=2.5)
    assert result.to_dict()["result"] == {"item": "tea", "euros": 2.5}


async def test_a_leads_typed_result_is_stored_and_runs_show_gives_it_back(tmp_path: Path) -> None:
    def answer(request: ModelRequest) -> ModelResponse:
        return call("complete", summary="priced", result={"item": "tea", "euros": 2.5})

    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, lead=Lead(output_schema=Price))
    async with rt:
        result = await rt.run("Price the tea.")
    shown = run_cli(["runs", "show", result.run_id, "--json", "--workspace", str(tmp_path)])
    assert shown.returncode == 0, shown.stderr
    stored = json.loads(shown.stdout)
    assert stored["result"] == {"item": "tea", "euros": 2.5}
    assert stored == result.to_dict() | {"usage": stored["usage"]}


async def test_a_tool_function_given_to_a_subagent_is_its_own_and_not_the_leads(tmp_path: Path) -> None:
    @tool
    def lookup(word: str) -> str:
        """Look a word up."""
        return f"{word}: a hot drink"

    seen: dict[str, set[str]] = {}

    def answer(request: ModelRequest) -> ModelResponse:
        names = {t.name for t in request.tools}
        if is_lead(request):
            seen["lead"] = names
            if request.messages[-1].role == "user":
                return call("task", subagent_type="glossary", description="define tea", prompt="Define tea.")
            return reply("done")
        seen["glossary"] = names
        if request.messages[-1].role == "user":
            return call("lookup", word="tea")
        return call("complete", summary=request.messages[-1].tool_results[0].content)

    glossary = Subagent(name="glossary", description="Defines words.", tools=[lookup])
    rt = Runtime(model=FunctionModel(answer), workspace=tmp_path, subagents=[glossary], store=False)
    result = await rt.run("Define tea.")
    assert result.subagents[0].summary == "tea: a hot drink"
    assert "lookup" in seen["glossary"] and "lookup" not in seen["lead"]


async def test_stream_yields_typed_events_ending_with_run_completed(tmp_path: Path) -> None:
    rt = Runtime(model=FunctionModel(lambda r: reply("hi")), workspace=tmp_path, store=False)
    events = [event async for event in rt.stream("Say hi.", limits=RunLimits(max_requests=1))]
    assert all(isinstance(e, Event) for e in events)
    assert (events[0].type, events[-1].type) == ("run.started", "run.completed")


def test_a_missing_workspace_folder_is_created(tmp_path: Path) -> None:
    rt = Runtime(model=FunctionModel(lambda r: reply("hi")), workspace=tmp_path / "new" / "ws", store=False)
    assert rt.workspace.root == (tmp_path / "new" / "ws").resolve() and rt.workspace.root.is_dir()


def test_a_bad_setting_is_refused_in_python_terms(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="give the path of a folder") as refused:
        Runtime(workspace=tmp_path / "file", store=False)
    assert "--workspace" not in str(refused.value)
    with pytest.raises(UserError, match="RunLimits max_parallel=0"):
        RunLimits(max_parallel=0)
    with pytest.raises(UserError, match="no built-in tool and no tool given"):
        Lead(tools=["read_file", "web_search"])
    with pytest.raises(UserError, match=r"model_aliases\): 'sonnet' is not alias=provider:model"):
        Runtime(workspace=tmp_path, store=False, extensions=Extensions(model_aliases=["sonnet"])).aliases  # noqa: B018
    with pytest.raises(UserError, match="or None for each model's own"):  # None is no limit for budgets only
        LoopSettings(context_window=10)


def test_a_lead_that_names_batch_task_needs_a_store(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="batch_task, which needs a store"):
        Runtime(workspace=tmp_path, lead=Lead(tools=["read_file", "batch_task"]), store=False)
