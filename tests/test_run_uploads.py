"""A run started with uploaded files gets them back when it is resumed after its process died."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

from delegate import Runtime
from delegate._store import RunRow, Store
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import FunctionModel, call, reply
from tests.durable_support import wait_for

UPLOADS = [{"filename": "q3.csv", "path": "uploads/q3.csv", "size": 2048, "content_type": "text/csv"}]
FIRST_PROCESS = """
import asyncio, json, sys
from delegate import Runtime
from delegate.testing import FunctionModel, call

async def answer(request):
    if not any(m.role == "assistant" for m in request.messages):
        return call("write_file", path="started.txt", content="x")
    await asyncio.Event().wait()  # killed here, its first answer and tool result recorded

runtime = Runtime(model=FunctionModel(answer), workspace=sys.argv[1], store=sys.argv[2])
runtime.run_sync("look at my uploads", uploaded_files=json.loads(sys.argv[3]))
"""


def lists_the_uploads(request: ModelRequest) -> ModelResponse:
    """After the replayed first turn: list the uploads if the tool is offered, then say what it saw."""
    last = request.messages[-1]
    if last.role == "tool" and last.tool_results[0].name == "write_file":
        tools = {t.name for t in request.tools}
        return call("list_uploaded_files") if "list_uploaded_files" in tools else reply("no uploads tool")
    return reply(last.tool_results[0].content)


def _killed_after_its_first_turn(store_url: str, workspace: Path, uploads: str) -> RunRow:
    """Start the run in a process of its own with `uploads` (JSON), SIGKILL it once its first
    turn is recorded; the run as stored then."""
    child = subprocess.Popen(
        [sys.executable, "-c", FIRST_PROCESS, str(workspace), store_url, uploads],
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


def _resumed_final(store_url: str, workspace: Path, run_id: str) -> str:
    async def resume() -> str:
        async with Runtime(model=FunctionModel(lists_the_uploads), workspace=workspace, store=store_url) as runtime:
            return (await runtime.resume(run_id)).final

    return asyncio.run(resume())


def test_a_resumed_run_offers_the_files_it_was_started_with(store_url: str, tmp_path: Path) -> None:
    run = _killed_after_its_first_turn(store_url, tmp_path, json.dumps(UPLOADS))
    assert run.uploaded_files == UPLOADS
    assert _resumed_final(store_url, tmp_path, run.id) == "- q3.csv (2,048 bytes, text/csv) at uploads/q3.csv"


def test_a_run_started_without_uploads_resumes_without_the_uploads_tool(store_url: str, tmp_path: Path) -> None:
    run = _killed_after_its_first_turn(store_url, tmp_path, "null")
    assert run.uploaded_files is None
    assert _resumed_final(store_url, tmp_path, run.id) == "no uploads tool"


def test_a_run_started_with_an_empty_upload_list_resumes_with_the_uploads_tool(store_url: str, tmp_path: Path) -> None:
    run = _killed_after_its_first_turn(store_url, tmp_path, "[]")
    assert run.uploaded_files == []
    assert _resumed_final(store_url, tmp_path, run.id) == "No files have been uploaded in this conversation."
