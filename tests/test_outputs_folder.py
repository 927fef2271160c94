"""The outputs folder (spec 002, audit row 51): a run has one inside its workspace (`outputs/` unless
the operator names another), made when the run starts and named in every agent's prompt; and
`/mnt/user-data/workspace/...` and `/mnt/user-data/outputs/...`, as spec 002 spells the folders
both the lead and its subagents see, resolve in file tools, `complete` paths and acceptance
criteria."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from delegate import Extensions, Runtime, UserError
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, is_lead, reply
from tests.cli_support import run_cli, scrubbed_env
from tests.loopback_openai import OpenAIServer, Reply

CRITERIA = [
    "file:/mnt/user-data/outputs/report.md non-empty",
    "file:/mnt/user-data/workspace/outputs/report.md exists",
    "dir:/mnt/user-data/outputs exists",
]


def delivering(request: ModelRequest) -> ModelResponse:
    if is_lead(request):
        if len(request.messages) == 1:
            return call(
                "task", subagent_type="general-purpose", description="d", prompt="report", acceptance_criteria=CRITERIA
            )
        return reply(request.messages[-1].tool_results[0].content)
    done = [m for m in request.messages if m.role == "tool"]
    if not done:
        return call("read_file", path="/mnt/user-data/workspace/notes.md")
    if len(done) == 1:
        assert "the notes" in done[0].tool_results[0].content
        return call("write_file", path="/mnt/user-data/outputs/report.md", content="the report")
    return call("complete", summary="wrote it", paths=["/mnt/user-data/outputs/report.md"])


async def test_mnt_user_data_paths_resolve_in_file_tools_complete_and_criteria(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("the notes")
    model = FunctionModel(delivering)
    result = await Runtime(model=model, workspace=tmp_path, store=False).run("go")
    (record,) = result.subagents
    assert (tmp_path / "outputs" / "report.md").read_text() == "the report"
    assert [a.relative_path for a in record.artifacts] == ["outputs/report.md"]
    assert [v["result"] for v in record.acceptance or []] == ["holds", "holds", "holds"]
    for request in model.requests:  # the lead's and the subagent's prompts both name the folder
        assert "Outputs folder: write the files you deliver" in request.system and "`outputs/`" in request.system


async def test_the_outputs_folder_is_made_when_a_run_starts_and_can_be_named(tmp_path: Path) -> None:
    model = FunctionModel(lambda request: reply("nothing to do"))
    await Runtime(model=model, workspace=tmp_path, store=False).run("go")
    assert (tmp_path / "outputs").is_dir()
    rt = Runtime(model=model, workspace=tmp_path, extensions=Extensions(outputs="deliverables/2026"), store=False)
    await rt.run("go")
    assert (tmp_path / "deliverables" / "2026").is_dir()
    assert "`deliverables/2026/`" in model.requests[-1].system
    assert rt.workspace.resolve("/mnt/user-data/outputs/a.md") == tmp_path.resolve() / "deliverables/2026/a.md"


@pytest.mark.parametrize("outputs", ["/abs", "..", "../up", ".", ".delegate/out", ".git"])
def test_an_outputs_folder_outside_the_agents_reach_is_refused(outputs: str) -> None:
    with pytest.raises(UserError, match="outputs="):
        Extensions(outputs=outputs)


async def test_mnt_user_data_paths_never_lead_out_of_the_workspace(tmp_path: Path) -> None:
    rt = Runtime(model=FunctionModel(lambda r: reply("x")), workspace=tmp_path / "ws", store=False)
    for path in ("/mnt/user-data/outputs/../../x", "/mnt/user-data/workspace/../x", "/mnt/user-data/uploads/x"):
        with pytest.raises(Exception, match="outside the workspace"):
            rt.workspace.resolve(path, write=True)
    with pytest.raises(Exception, match="internal state"):
        rt.workspace.resolve("/mnt/user-data/workspace/.delegate/delegate.db")


def test_delegate_run_writes_deliverables_into_its_outputs_folder(tmp_path: Path) -> None:
    def responder(body: dict[str, Any]) -> Reply:
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        system = body["messages"][0]["content"]
        assert "`results/`" in system  # every agent's prompt names it
        if "You are the lead agent" in system:
            if turns == 0:
                task = {"subagent_type": "general-purpose", "description": "d", "prompt": "report"}
                criteria = ["file:/mnt/user-data/outputs/r.md non-empty"]
                return Reply(tool_calls=[("task", task | {"acceptance_criteria": criteria})])
            return Reply(content="done")
        if turns == 0:
            return Reply(tool_calls=[("write_file", {"path": "/mnt/user-data/outputs/r.md", "content": "r"})])
        return Reply(tool_calls=[("complete", {"summary": "s", "paths": ["/mnt/user-data/outputs/r.md"]})])

    with OpenAIServer(responder) as server:
        env = scrubbed_env() | {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        args = ["run", "go", "--model", "openai:m", "--outputs", "results", "--json", "--workspace", str(tmp_path)]
        done = run_cli(args, env=env)
    assert done.returncode == 0, done.stderr
    (record,) = json.loads(done.stdout)["subagents"]
    assert (tmp_path / "results" / "r.md").read_text() == "r"
    assert record["artifacts"][0]["relative_path"] == "results/r.md"
    assert record["acceptance"][0]["result"] == "holds"
