"""A lead that delegates file writes, served by the loopback OpenAI server, for the tests of calls
that wait for a person (CLI, HTTP, web page): each subagent writes the file its prompt names and
completes with what its write gave back; the lead answers with what its task gave back."""

from __future__ import annotations

from typing import Any

from delegate import Store
from delegate._record import ApprovalRow
from delegate.models import ModelRequest, ModelResponse
from delegate.testing import call, is_lead, reply
from tests.durable_support import wait_for
from tests.loopback_openai import Reply


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


class Writers:
    """The responder: the lead starts one general-purpose subagent a path of `paths`."""

    def __init__(self, *paths: str) -> None:
        self.paths = paths

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        turns = sum(1 for m in messages if m["role"] == "assistant")
        last = _text(messages[-1])
        if is_lead(body):
            if turns == 0:
                task = {"subagent_type": "general-purpose", "description": "write notes"}
                task["prompts"] = [f"write {p}" for p in self.paths]
                return Reply(tool_calls=[("task", task)], prompt_tokens=100, completion_tokens=20)
            return Reply(content=f"Done. {last}", prompt_tokens=200, completion_tokens=10)
        asked = next(_text(m) for m in messages if m["role"] == "user")
        path = asked.split("write ", 1)[1].split()[0]
        if turns == 0:
            write = {"path": path, "content": f"notes for {path}\n"}
            return Reply(tool_calls=[("write_file", write)], prompt_tokens=30, completion_tokens=7)
        return Reply(
            tool_calls=[("complete", {"summary": f"write said: {last}"})], prompt_tokens=40, completion_tokens=5
        )


def waiting_calls(store: Store, count: int = 1) -> list[ApprovalRow]:
    """The calls of the store's only run that wait for a decision, once there are `count`."""

    def found() -> list[ApprovalRow]:
        runs = store.list_runs()
        pending = store.approvals(runs[0].id, pending=True) if runs else []
        return pending if len(pending) >= count else []

    return wait_for(found, what=f"{count} call(s) waiting for a decision")


def write_notes(request: ModelRequest) -> ModelResponse:
    """`Writers("notes.md")` as a fake model's function (for `FunctionModel`)."""
    last = request.messages[-1]
    if is_lead(request):
        if len(request.messages) == 1:
            return call("task", subagent_type="general-purpose", description="write notes", prompt="write notes.md")
        return reply(f"Done. {last.tool_results[0].content}")
    if last.role == "user":
        return call("write_file", path="notes.md", content="notes for notes.md\n")
    return call("complete", summary=f"write said: {last.tool_results[0].content}")
