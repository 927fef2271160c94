"""A weak (constrained) model is offered what it can use: no batch tools unless the task asks for a
batch or one exists, ids it cannot invent (batch ids, subagent types come from enums of the ones
that exist), and opening turns chosen for the task's shape. Played by a loopback "tiny model" that
takes the first option its grammar offers, through the real `openai` SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from delegate import Extensions, Runtime, Store, Subagent
from delegate.batch import Batches
from delegate.models import OpenAIModel
from tests.loopback_openai import OpenAIServer, Reply


def options(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["response_format"]["json_schema"]["schema"]["anyOf"]


def offered(body: dict[str, Any]) -> list[str]:
    return [o["properties"]["tool"]["const"] for o in options(body)]


def arguments_of(body: dict[str, Any], tool: str) -> dict[str, Any]:
    option = next(o for o in options(body) if o["properties"]["tool"]["const"] == tool)
    return option["properties"]["arguments"]["properties"]


def first_option(body: dict[str, Any]) -> Reply:
    """What a tiny model under the grammar does at its most obedient: the first option, each
    argument's first allowed value (or a word); asked for plain text, a sentence."""
    if "response_format" not in body:
        return Reply(content="A river runs to the sea.")
    option = options(body)[0]
    tool = option["properties"]["tool"]["const"]
    arguments: dict[str, Any] = {}
    for name, schema in cast(dict[str, Any], option["properties"]["arguments"].get("properties", {})).items():
        if "enum" in schema:
            arguments[name] = schema["enum"][0]
        elif schema.get("type") == "array":
            arguments[name] = [schema.get("items", {}).get("enum", ["x"])[0]]
        elif schema.get("type") == "string":
            arguments[name] = "A river runs to the sea."
    return Reply(content=json.dumps({"tool": tool, "arguments": arguments}))


def final(body: dict[str, Any]) -> Reply:
    return Reply(content='{"tool": "final_answer", "arguments": {"text": "ok"}}')


def weak(server: OpenAIServer) -> OpenAIModel:
    return OpenAIModel("tiny", base_url=server.base_url, api_key="k", constrained_tools=True, lean_tools=True)


def test_a_one_file_task_opens_with_reading_its_file_writing_the_new_one_and_answering(tmp_path: Path) -> None:
    """The write's content is asked for as plain text (a small model writes prose far better than
    JSON), from what the task said and the read found, without the model's own JSON calls."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "rivers.md").write_text("Rivers carry water from hills to the sea.\n")
    with OpenAIServer(first_option) as server:
        rt = Runtime(model=weak(server), workspace=tmp_path, store=False)
        result = rt.run_sync("Summarise docs/rivers.md in one sentence into summary.txt")
        bodies = server.requests

    assert [offered(b) for b in (bodies[0], bodies[2])] == [["read_file"], ["final_answer"]]
    assert arguments_of(bodies[0], "read_file")["path"]["enum"] == ["docs/rivers.md"]
    assert "response_format" not in bodies[1]
    asked = bodies[1]["messages"][-1]["content"]
    assert asked == (  # what was read (without line numbers), the task, what to write
        "Rivers carry water from hills to the sea.\n\nSummarise docs/rivers.md in one sentence into summary.txt\n\n"
        "Answer with that text alone: no JSON, no comments."
    )
    assert '"tool"' not in json.dumps(bodies[1]["messages"])
    assert (
        "Your steps: read docs/rivers.md with read_file; then write summary.txt" in bodies[0]["messages"][0]["content"]
    )
    assert (tmp_path / "summary.txt").read_text() == "A river runs to the sea.\n"
    assert (result.status, result.stop_reason) == ("completed", "final_answer")


def test_a_task_that_asks_for_several_files_opens_with_delegating_once(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("alpha\n")
    with OpenAIServer(final) as server:
        rt = Runtime(model=weak(server), workspace=tmp_path, store=False)
        rt.run_sync("From a.md write a title into title.txt and a list of steps into steps.md")
        first = server.requests[0]

    assert offered(first) == ["task", "task"]  # with `prompts`, or with one `prompt`


def test_a_model_that_calls_tools_natively_gets_no_opening_of_ours(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("notes\n")
    with OpenAIServer(lambda body: Reply(content="Done.")) as server:
        model = OpenAIModel("capable", base_url=server.base_url, api_key="k")
        Runtime(model=model, workspace=tmp_path, store=False).run_sync("Summarise notes.md into s.md")
        first = server.requests[0]

    assert "tool_choice" not in first
    assert "Your steps" not in first["messages"][0]["content"]


def test_a_weak_lead_is_offered_no_batch_tools_unless_the_task_asks_for_a_batch(tmp_path: Path) -> None:
    with OpenAIServer(final) as server:
        rt = Runtime(model=weak(server), workspace=tmp_path, store=str(tmp_path / "d.db"))
        rt.run_sync("What is in this folder?")
        rt.run_sync("Run a batch over the files of this folder.")
        plain, batch = server.requests

    assert not {"batch_task", "batch_status", "cancel_batch"} & set(offered(plain))
    assert "batch_task" in offered(batch)
    # no batch exists, and none is named: there is no id to follow or cancel
    assert not {"batch_status", "cancel_batch"} & set(offered(batch))


def test_batch_ids_and_subagent_types_are_grounded_in_the_ones_that_exist(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'd.db'}")
    submitted = Batches(store).submit(
        "default", subagent_type="general-purpose", items=[{"key": "a", "prompt": "do a"}], title="t"
    )
    with OpenAIServer(final) as server:
        rt = Runtime(model=weak(server), workspace=tmp_path, store=store)
        rt.run_sync("How is it going?")
        body = server.requests[0]
    store.close()

    assert arguments_of(body, "batch_status")["batch_id"]["enum"] == [submitted.batch.id]
    assert arguments_of(body, "cancel_batch")["batch_id"]["enum"] == [submitted.batch.id]
    assert arguments_of(body, "batch_task")["subagent_type"]["enum"] == ["general-purpose", "explore"]
    assert arguments_of(body, "task")["subagent_type"]["enum"] == ["general-purpose", "explore"]


def test_subagent_types_stay_an_enum_for_a_weak_model_when_the_listing_is_shortened(tmp_path: Path) -> None:
    many = [Subagent(name=f"type-{i:03d}", description="Does one kind of thing. " * 20) for i in range(120)]
    with OpenAIServer(final) as server:
        rt = Runtime(
            model=weak(server),
            workspace=tmp_path,
            store=False,
            subagents=many,
            extensions=Extensions(builtin_subagents=False),
        )
        rt.run_sync("Hello.")
        body = server.requests[0]

    assert arguments_of(body, "task")["subagent_type"]["enum"] == [s.name for s in many]
