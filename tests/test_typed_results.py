"""Typed results (`output_schema`) and the one input check, through the `openai:` adapter against
the loopback server: in a lead's run, in the record, and in a batch of 100 items exported as JSON
Lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from delegate import Runtime, Store, UserError
from delegate.agents import Subagent
from delegate.batch import Batches
from delegate.testing import is_lead
from tests.cli_support import run_cli
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.test_batch_cli import env_for, write_items
from tests.test_results import close, openai_model, prompt_of, tool_results

PRICE_SCHEMA = """\
---
name: pricer
description: Reads one product page and returns its price.
tools: [read_file]
output_schema:
  type: object
  properties:
    product: {type: string}
    price: {type: number, minimum: 0}
  required: [product, price]
  additionalProperties: false
---
Find the product's price.
"""


def write_pricer(workspace: Path) -> None:
    folder = workspace / ".delegate" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pricer.md").write_text(PRICE_SCHEMA)


def complete_tool(body: dict[str, Any]) -> dict[str, Any]:
    return next(t["function"] for t in body["tools"] if t["function"]["name"] == "complete")


def delegating_lead(body: dict[str, Any]) -> Reply:
    if body["messages"][-1]["role"] == "user":
        return Reply(tool_calls=[("task", {"subagent_type": "pricer", "description": "price", "prompt": "the mug"})])
    return Reply(content="\n---\n".join(tool_results(body)))


async def test_a_typed_result_is_checked_sent_back_when_wrong_and_carried_in_the_record(tmp_path: Path) -> None:
    write_pricer(tmp_path)
    errors: list[str] = []

    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            return delegating_lead(body)
        assert complete_tool(body)["parameters"]["properties"]["result"]["required"] == ["product", "price"]
        seen = tool_results(body)
        if not seen:  # first try: a price that is text, and an extra field
            bad = {"product": "mug", "price": "cheap", "colour": "red"}
            return Reply(tool_calls=[("complete", {"summary": "priced", "result": bad})])
        errors.append(seen[-1])
        return Reply(
            tool_calls=[("complete", {"summary": "priced the mug", "result": {"product": "mug", "price": 4.5}})]
        )

    store = Store.for_workspace(tmp_path)
    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=store)
        result = await rt.run("price the mug")
        await close(rt)
    [error] = errors
    assert "result does not match the output schema" in error
    assert "result['price']: 'cheap' is not of type 'number'" in error
    assert "'colour' was unexpected" in error and "2 tries left" in error
    [record] = result.subagents
    assert (record.status, record.result) == ("completed", {"product": "mug", "price": 4.5})
    assert 'Result: {"product":"mug","price":4.5}' in result.final  # the lead sees it, compactly
    assert result.to_dict()["subagents"][0]["result"] == {"product": "mug", "price": 4.5}
    assert store.subagent_records(result.run_id)[0].result == {"product": "mug", "price": 4.5}
    store.close()


async def test_a_subagent_that_never_gets_its_result_right_ends_in_error(tmp_path: Path) -> None:
    write_pricer(tmp_path)

    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            return delegating_lead(body)
        return Reply(tool_calls=[("complete", {"summary": "no idea"})])  # never passes `result`

    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=False)
        result = await rt.run("price the mug")
        await close(rt)
    [record] = result.subagents
    assert (record.status, record.stop_reason, record.steps) == ("error", "invalid_result", 3)
    assert "after 3 tries" in (record.error or "") and "result is missing" in (record.error or "")
    assert record.result is None


class Verdict(BaseModel):
    file: str
    ok: bool
    problems: list[str] = []


async def test_a_pydantic_model_in_code_types_the_result(tmp_path: Path) -> None:
    checker = Subagent(name="checker", description="Checks one file.", output_schema=Verdict, tools=[])

    def responder(body: dict[str, Any]) -> Reply | Fault:
        if is_lead(body):
            if body["messages"][-1]["role"] == "user":
                return Reply(
                    tool_calls=[("task", {"subagent_type": "checker", "description": "check", "prompt": "a.py"})]
                )
            return Reply(content="done")
        return Reply(tool_calls=[("complete", {"summary": "checked", "result": {"file": "a.py", "ok": "yes"}})])

    with OpenAIServer(responder) as server:
        rt = Runtime(model=openai_model(server), workspace=tmp_path, store=False, subagents=[checker])
        result = await rt.run("check a.py")
        await close(rt)
    [record] = result.subagents
    assert record.result == {"file": "a.py", "ok": True, "problems": []}  # validated and normalised


def test_a_typed_batch_of_100_items_exports_each_result_as_json_lines(tmp_path: Path) -> None:
    write_pricer(tmp_path)
    items = write_items(tmp_path / "items.jsonl", 100)

    def responder(body: dict[str, Any]) -> Reply | Fault:
        n = int(prompt_of(body).split()[-1])
        result = {"product": f"item {n}", "price": n / 4} if n != 7 or tool_results(body) else {"product": "x"}
        return Reply(tool_calls=[("complete", {"summary": f"priced item {n}", "result": result})])

    with OpenAIServer(responder) as server:
        env = env_for(server.base_url)
        submitted = run_cli(
            ["batch", "submit", str(items), "--type", "pricer", "--model", "openai:m", "--max-running", "10"],
            env,
            tmp_path,
        )
        assert submitted.returncode == 0, submitted.stderr
        batch_id = submitted.stdout.strip().splitlines()[-1]
        out = tmp_path / "results.jsonl"
        exported = run_cli(["batch", "export", batch_id, "-o", str(out)], env, tmp_path)
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["key"] for r in rows] == [f"item-{i}" for i in range(100)]  # submission order
    assert all(r["status"] == "succeeded" for r in rows)
    assert [r["result"] for r in rows] == [{"product": f"item {i}", "price": i / 4} for i in range(100)]


def test_a_batch_refuses_at_submission_what_task_would_refuse_and_stores_nothing(tmp_path: Path) -> None:
    write_pricer(tmp_path)
    path = tmp_path / "items.jsonl"
    lines = [
        {"key": "many", "prompt": "p", "acceptance_criteria": [f"file:{i}.md exists" for i in range(21)]},
        {"key": "long", "prompt": "p", "acceptance_criteria": ["x" * 501]},
        {"key": "budget", "prompt": "p", "token_budget": 0},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = run_cli(
        ["batch", "submit", str(path), "--type", "pricer", "--detach"], env_for("http://127.0.0.1:9/v1"), tmp_path
    )
    assert done.returncode == 2
    assert "acceptance_criteria has 21 items; at most 20" in done.stderr
    assert "has 501 characters; at most 500" in done.stderr
    said = "items.jsonl:3: limits: RunLimits token_budget=0: give a whole number of at least 1, or leave it out (null"
    assert said in done.stderr
    assert Batches(Store.for_workspace(tmp_path)).list_batches("default") == []


def test_an_output_schema_that_is_not_a_json_schema_is_refused_with_the_type_named() -> None:
    with pytest.raises(UserError, match="subagent type 'pricer': output_schema is not a valid JSON Schema"):
        Subagent(name="pricer", description="d", output_schema={"type": "money"})
