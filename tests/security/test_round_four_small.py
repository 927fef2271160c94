"""Issue 34's smaller findings, each reproduced against the real server, CLI and store.

- Two `POST /runs/{id}/resume` at once dropped the winner from the server's live runs: a SIGTERM
  then left it `running`, owned by a dead process, and out of its user's cap.
- The reason "always" (over HTTP, or `runs approve --reason always`) approved the rule for the rest
  of the run without a word; only the explicit option may.
- Stopping a subagent id that never existed answered 202.
- Errors showed the model and HTTP users the server's absolute paths and the user-id folder.
- A 429 said "you have 8 runs going" to a user with none running.
- `runs approve --deny` printed "denyd".
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from delegate import (
    Extensions,
    Lead,
    Permissions,
    Runtime,
    RuntimeSettings,
    Store,
    ToolContext,
    ToolError,
    Workspace,
    tool,
)
from delegate._record import ApprovalRow
from delegate._time import utc_now
from delegate.models import ModelRequest, ModelResponse
from delegate.server import Limits
from delegate.server._runs import RunManager
from delegate.testing import FunctionModel, call, is_lead, reply
from delegate.tools import BUILTIN_TOOLS
from tests.approvals_support import waiting_calls
from tests.cli_support import delegate, scrubbed_env
from tests.durable_support import wait_for
from tests.security.server_support import Gate, api, live_server
from tests.test_server_api import client, serving, stuck_subagents
from tests.test_server_api import start as start_run

ASK_WRITE = Extensions(permissions=Permissions(ask=["Write"]))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    opened = Store.for_workspace(tmp_path)
    yield opened  # type: ignore[misc]
    opened.close()


def two_writes(request: ModelRequest) -> ModelResponse:
    """The lead starts one subagent, which writes a.md, then b.md, then completes."""
    last = request.messages[-1]
    if is_lead(request):
        if len(request.messages) == 1:
            return call("task", subagent_type="general-purpose", description="write two", prompt="write two files")
        return reply(f"Done. {last.tool_results[0].content}")
    written = sum(1 for m in request.messages if m.role == "tool")
    if written == 0:
        return call("write_file", path="a.md", content="a\n")
    if written == 1:
        return call("write_file", path="b.md", content="b\n")
    return call("complete", summary="wrote both")


# -- concurrent resumes ---------------------------------------------------------------------------


def interrupted_run(workspace: Path, store: Store, token: str) -> str:
    """A run of a served user, interrupted (its server stopped while its subagents worked)."""
    with serving(workspace, store, stuck_subagents) as server, client(server, token) as http:
        run_id = start_run(http)
    found = store.get_run(run_id)
    assert found is not None and found.status == "interrupted"
    return run_id


def test_two_resumes_at_once_keep_the_winner_live_and_a_stop_leaves_it_interrupted(
    tmp_path: Path, store: Store
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    run_id = interrupted_run(workspace, store, store.add_user("alice")[1])
    user_id = store.get_run(run_id).user_id  # type: ignore[union-attr]
    assert user_id is not None
    settings = RuntimeSettings(workspace=workspace, model=FunctionModel(stuck_subagents))
    runs = RunManager(store, lambda user, _: settings.build(user_id=user, store=store))

    async def both() -> list[BaseException | None]:
        outcomes = await asyncio.gather(
            runs.resume(run_id, user_id), runs.resume(run_id, user_id), return_exceptions=True
        )
        assert run_id in runs.live  # the winner is live here: a stop reaches it, the user's cap counts it
        await runs.close()
        return list(outcomes)

    outcomes = asyncio.run(both())
    assert sorted(type(o).__name__ for o in outcomes) == ["NoneType", "UserError"]
    run = store.get_run(run_id)
    assert run is not None and (run.status, run.owner) == ("interrupted", None)


# -- "always" ---------------------------------------------------------------------------------------


def test_the_reason_always_over_http_approves_that_call_only(tmp_path: Path, store: Store) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    token = store.add_user("alice")[1]
    with serving(workspace, store, two_writes, extensions=ASK_WRITE) as server, client(server, token) as http:
        run_id = start_run(http, "write two")
        (first,) = waiting_calls(store)
        body = {"decision": "approve", "reason": "always"}
        assert http.post(f"/runs/{run_id}/approvals/{first.call_id}", json=body).status_code == 200
        second = wait_for(
            lambda: [a for a in store.approvals(run_id, pending=True) if a.call_id != first.call_id],
            what="the second write to wait for a person",
        )
        assert [a.arguments["path"] for a in second] == ["b.md"]
        explicit = http.post(
            f"/runs/{run_id}/approvals/{second[0].call_id}", json={"decision": "approve", "always": True}
        )
        assert explicit.status_code == 200 and explicit.json()["always"] is True
        wait_for(lambda: store.get_run(run_id).status == "completed", what="the run to complete")  # type: ignore[union-attr]


def test_runs_approve_reason_always_approves_that_call_only_and_deny_reads_denied(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with Store.for_workspace(workspace) as store:
        run = store.create_run(prompt="p", model="m")
        for n, path in enumerate(["a.md", "b.md"]):
            row = ApprovalRow(
                run_id=run.id,
                call_id=f"c{n}",
                agent_id="sub1",
                tool="write_file",
                arguments={"path": path},
                rule="Write",
                requested_at=utc_now(),
            )
            store.request_approval(row)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = delegate("runs", "approve", run.id, *args, "-w", str(workspace))
        return subprocess.run(command, env=scrubbed_env(), capture_output=True, text=True, timeout=120)

    approved, denied = cli("c0", "--reason", "always"), cli("c1", "--deny")
    assert approved.returncode == 0 and denied.returncode == 0, (approved.stderr, denied.stderr)
    assert "c0 (write_file): approved (always)" in approved.stdout
    assert "c1 (write_file): denied" in denied.stdout and "denyd" not in denied.stdout
    with Store.for_workspace(workspace) as store:
        rows = {a.call_id: a for a in store.approvals(run.id)}
    assert (rows["c0"].always, rows["c0"].reason) == (False, "always")  # the words alone approve one call


# -- stopping a subagent that never was ----------------------------------------------------------------


def test_stopping_a_subagent_id_that_never_ran_answers_404(tmp_path: Path, store: Store) -> None:
    token = store.add_user("alice")[1]
    (tmp_path / "ws").mkdir()
    with serving(tmp_path / "ws", store, stuck_subagents) as server, client(server, token) as http:
        run_id = start_run(http)
        wait_for(lambda: any(e.type == "subagent.started" and e.agent_id == "sub2" for e in store.events(run_id)))
        unknown = http.post(f"/runs/{run_id}/agents/sub9/stop")
        known = http.post(f"/runs/{run_id}/agents/sub1/stop")
    assert unknown.status_code == 404, unknown.text
    assert "no subagent sub9" in unknown.json()["error"]["message"]
    assert known.status_code == 202


# -- paths ---------------------------------------------------------------------------------------------


async def test_a_path_outside_the_workspace_is_refused_without_naming_the_servers_folders(tmp_path: Path) -> None:
    root = tmp_path / "srv" / ".delegate" / "users" / "u_0123456789ab"
    root.mkdir(parents=True)
    ctx = ToolContext(run_id="r", agent_id="sub1", workspace=Workspace.open(root), emit=lambda e: None)
    for path in ["../x.md", "/etc/passwd"]:
        with pytest.raises(ToolError) as caught:
            await BUILTIN_TOOLS["read_file"].run(ctx, {"path": path})
        message = str(caught.value)
        assert "outside the workspace" in message
        assert str(tmp_path) not in message and "u_0123456789ab" not in message


def test_a_tool_that_crashes_tells_the_model_workspace_relative_paths(tmp_path: Path) -> None:

    root = (tmp_path / "srv" / ".delegate" / "users" / "u_0123456789ab").resolve()

    @tool
    def open_report(name: str) -> str:
        """Open a report."""
        return (root / "reports" / name).read_text()

    seen: list[str] = []

    def model(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "user":
            return call("open_report", name="q3.md")
        seen.append(request.messages[-1].tool_results[0].content)
        return reply("done")

    rt = Runtime(model=FunctionModel(model), workspace=root, lead=Lead(tools=[open_report]), store=False)
    rt.run_sync("open the q3 report")
    assert "reports/q3.md" in seen[0]
    assert str(root) not in seen[0] and "u_0123456789ab" not in seen[0]


# -- the cap's message ---------------------------------------------------------------------------------


def test_the_429_says_how_many_runs_the_user_has_running_and_starting(tmp_path: Path, store: Store) -> None:
    alice = store.add_user("alice")[1]
    gate = Gate()
    with live_server(tmp_path, store, limits=Limits(max_live_runs_per_user=1), gate=gate) as server:
        with api(server, alice) as http:
            assert http.post("/runs", json={"prompt": "one"}).status_code == 202
            refused = http.post("/runs", json={"prompt": "two"})
        gate.release()
    message = refused.json()["error"]["message"]
    assert refused.status_code == 429
    assert "your runs on this server are at its cap of 1 per user: 1 running, 0 starting" in message
