"""What a run was started with besides its prompt and model (its uploaded files, its limits) it
keeps when it is resumed after its process died."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from delegate import RunLimits, RunResult, Runtime, Store
from delegate._store import RunRow
from delegate.models import ModelProfile, ModelRequest, ModelResponse, Pricing
from delegate.testing import FunctionModel, call, reply, respond
from tests.durable_support import wait_for

UPLOADS = [{"filename": "q3.csv", "path": "uploads/q3.csv", "size": 2048, "content_type": "text/csv"}]
FIRST_PROCESS = """
import asyncio, json, sys
from delegate import RunLimits, Runtime
from delegate.models import ModelProfile, Pricing
from delegate.testing import FunctionModel, call

async def answer(request):
    if not any(m.role == "assistant" for m in request.messages):
        return call("write_file", path="started.txt", content="x")
    await asyncio.Event().wait()  # killed here, its first answer and tool result recorded

priced = ModelProfile(pricing=Pricing(provider="openai"))  # its answers cost OpenAI's prices
model = FunctionModel(answer, name="openai:gpt-4.1-mini", profile=priced)
runtime = Runtime(model=model, workspace=sys.argv[1], store=sys.argv[2])
limits = RunLimits(**{"max_subagents": 7, **json.loads(sys.argv[4])})
runtime.run_sync("look at my uploads", uploaded_files=json.loads(sys.argv[3]), limits=limits)
"""


def lists_the_uploads(request: ModelRequest) -> ModelResponse:
    """After the replayed first turn: list the uploads if the tool is offered, then say what it saw."""
    last = request.messages[-1]
    if last.role == "tool" and last.tool_results[0].name == "write_file":
        tools = {t.name for t in request.tools}
        return call("list_uploaded_files") if "list_uploaded_files" in tools else reply("no uploads tool")
    return reply(last.tool_results[0].content)


def _killed_after_its_first_turn(store_url: str, workspace: Path, uploads: str, limits: str = "{}") -> RunRow:
    """Start the run in a process of its own with `uploads` and `limits` (JSON: `RunLimits`'
    fields), SIGKILL it once its first turn is recorded; the run as stored then."""
    child = subprocess.Popen(
        [sys.executable, "-c", FIRST_PROCESS, str(workspace), store_url, uploads, limits],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with Store.open(store_url) as store:
        try:
            found = wait_for(
                lambda: (runs := store.list_runs(None)) and len(store.checkpoints(runs[0].id)) >= 2 and runs[0],
                what="the first turn's checkpoints",
            )
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        run = store.get_run(found.id)
    assert run is not None and run.status == "interrupted"
    return run


def _resumed(store_url: str, workspace: Path, run_id: str, limits: RunLimits | None = None) -> RunResult:
    async def resume() -> RunResult:
        async with Runtime(model=FunctionModel(lists_the_uploads), workspace=workspace, store=store_url) as runtime:
            return await runtime.resume(run_id, limits=limits)

    return asyncio.run(resume())


def test_a_resumed_run_offers_the_files_it_was_started_with(store_url: str, tmp_path: Path) -> None:
    run = _killed_after_its_first_turn(store_url, tmp_path, json.dumps(UPLOADS))
    assert run.uploaded_files == UPLOADS
    assert _resumed(store_url, tmp_path, run.id).final == "- q3.csv (2,048 bytes, text/csv) at uploads/q3.csv"


def test_a_run_started_without_uploads_resumes_without_the_uploads_tool(store_url: str, tmp_path: Path) -> None:
    run = _killed_after_its_first_turn(store_url, tmp_path, "null")
    assert run.uploaded_files is None
    assert _resumed(store_url, tmp_path, run.id).final == "no uploads tool"


def test_a_run_started_with_an_empty_upload_list_resumes_with_the_uploads_tool(store_url: str, tmp_path: Path) -> None:
    run = _killed_after_its_first_turn(store_url, tmp_path, "[]")
    assert run.uploaded_files == []
    assert _resumed(store_url, tmp_path, run.id).final == "No files have been uploaded in this conversation."


def test_a_resumed_run_keeps_the_request_budget_it_was_started_with(store_url: str, tmp_path: Path) -> None:
    """Started with `max_requests=2` (as `POST /runs` does), it made one request before it was
    killed; resumed by a runtime with no budget of its own, it may make one more, not three."""
    run = _killed_after_its_first_turn(store_url, tmp_path, json.dumps(UPLOADS), limits='{"max_requests": 2}')
    assert run.limits == RunLimits(max_requests=2, max_subagents=7).to_dict()
    result = _resumed(store_url, tmp_path, run.id)
    assert (result.status, result.stop_reason) == ("aborted", "run_max_requests")
    assert result.final == ""


def test_a_resumed_run_keeps_the_cost_budget_it_was_started_with(store_url: str, tmp_path: Path) -> None:
    """Started with a cost budget of $0.25; resumed by a runtime with no budget of its own, it
    still holds it: an answer of a million input tokens ($0.40) spends it, and no request follows."""
    run = _killed_after_its_first_turn(store_url, tmp_path, "[]", limits='{"cost_budget": 0.25}')
    assert run.limits is not None and run.limits["cost_budget"] == 0.25

    def costly(request: ModelRequest) -> ModelResponse:
        return respond([("list_uploaded_files", {})], input_tokens=1_000_000)

    async def resume() -> RunResult:
        model = FunctionModel(
            costly, name="openai:gpt-4.1-mini", profile=ModelProfile(pricing=Pricing(provider="openai"))
        )
        async with Runtime(model=model, workspace=tmp_path, store=store_url) as runtime:
            return await runtime.resume(run.id)

    result = asyncio.run(resume())
    assert (result.status, result.stop_reason) == ("aborted", "run_cost_budget")
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0.25


def test_a_resume_given_limits_runs_under_them_instead(store_url: str, tmp_path: Path) -> None:
    run = _killed_after_its_first_turn(store_url, tmp_path, json.dumps(UPLOADS), limits='{"max_requests": 2}')
    result = _resumed(store_url, tmp_path, run.id, limits=RunLimits(max_requests=5))
    assert (result.status, result.usage.requests) == ("completed", 3)


def test_a_run_stored_before_its_limits_were_kept_resumes_under_the_budgets_it_had(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration core.0015 fills the limits of the runs stored before it from the two budgets
    they kept; a run with neither keeps none, and resumes under the runtime's."""
    from delegate._store import _base, _schema

    before = tuple(m for m in _schema.CORE_MIGRATIONS if m.name != "core.0015_run_limits")
    monkeypatch.setattr(_base, "CORE_MIGRATIONS", before)
    columns = ("id", "prompt", "model", "status", "usage", "created_at", "token_budget", "max_requests")
    runs = sa.table("runs", *map(sa.column, columns))
    with Store.open(store_url) as store, store.write() as conn:  # as a version before 0015 stored them
        for run_id, tokens, requests in (("old_a", 500, None), ("old_b", None, 3), ("old_c", None, None)):
            row = (run_id, "p", "m", "completed", "{}", "2026-12-01T00:00:00+00:00", tokens, requests)
            conn.execute(runs.insert().values(dict(zip(columns, row, strict=True))))
    monkeypatch.undo()
    with Store.open(store_url) as store:
        stored = [store.get_run(run_id) for run_id in ("old_a", "old_b", "old_c")]
    assert [run.limits for run in stored if run is not None] == [{"token_budget": 500}, {"max_requests": 3}, None]
    assert RunLimits(timeout=60, token_budget=9).over({"token_budget": 500}) == RunLimits(timeout=60, token_budget=500)
