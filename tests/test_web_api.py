"""What the web page reads besides runs and batches: `GET /files` (a bounded preview of a file of
the caller's own workspace) and the finished subagents of a run that is still going."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import RuntimeSettings, Store
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, call, reply, respond
from tests.loopback_server import LiveServer


@pytest.fixture
def server(workspace: Path, store: Store) -> Iterator[LiveServer]:
    model = lambda _: FunctionModel(one_quick_one_stuck)  # noqa: E731 - a fresh fake per run
    settings = ServerSettings(runtime=RuntimeSettings(workspace=workspace), model=model, run_batches=False)
    with LiveServer(create_app(settings, store=store)) as running:
        yield running


def api(server: LiveServer, token: str) -> httpx2.Client:
    return httpx2.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)


def own_folder(workspace: Path, user_id: str) -> Path:
    folder = workspace / ".delegate" / "users" / user_id
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_file_of_the_callers_workspace_previews_as_text_with_its_size(
    server: LiveServer, store: Store, workspace: Path
) -> None:
    alice, token = store.add_user("alice")
    text = "# Notes\n<script>alert(1)</script> & é\n"
    (own_folder(workspace, alice) / "docs").mkdir()
    (own_folder(workspace, alice) / "docs" / "notes.md").write_text(text, encoding="utf-8")
    with api(server, token) as client:
        found = client.get("/files", params={"path": "docs/notes.md"})
    assert found.status_code == 200
    body = found.json()
    assert (body["path"], body["text"], body["size"]) == ("docs/notes.md", text, len(text.encode()))
    assert (body["binary"], body["truncated"]) == (False, False)


def test_a_long_file_previews_only_its_first_bytes_and_says_so(
    server: LiveServer, store: Store, workspace: Path
) -> None:
    alice, token = store.add_user("alice")
    (own_folder(workspace, alice) / "long.txt").write_text("é" * 100, encoding="utf-8")  # 200 bytes
    (own_folder(workspace, alice) / "blob.bin").write_bytes(b"\x89PNG\r\n\x00\x00rest")
    with api(server, token) as client:
        long = client.get("/files", params={"path": "long.txt", "limit": 11}).json()
        blob = client.get("/files", params={"path": "blob.bin"}).json()
    assert (long["text"], long["size"], long["truncated"]) == ("é" * 5, 200, True)  # no half character
    assert (blob["binary"], blob["text"], blob["size"]) == (True, None, 12)


@pytest.mark.parametrize(
    "path",
    [
        "../../delegate.db",
        "../other-user/secret.txt",
        "/etc/passwd",
        ".delegate/agents/mine.md",
        "escape/passwd",
        "link-to-store",
    ],
)
def test_a_path_outside_the_callers_workspace_is_refused_whether_or_not_it_exists(
    server: LiveServer, store: Store, workspace: Path, path: str
) -> None:
    alice, token = store.add_user("alice")
    mine = own_folder(workspace, alice)
    (mine / ".delegate" / "agents").mkdir(parents=True)
    (mine / ".delegate" / "agents" / "mine.md").write_text("---\nname: mine\n---\n")
    (mine.parent / "other-user").mkdir()
    (mine.parent / "other-user" / "secret.txt").write_text("not yours")
    os.symlink("/etc", mine / "escape")
    os.symlink(workspace / ".delegate", mine / "link-to-store")
    with api(server, token) as client:
        refused = client.get("/files", params={"path": path})
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "outside_workspace"
    assert "is not in your workspace" in error["message"]
    assert str(workspace) not in error["message"]  # the server's own folders are not told


def test_one_user_cannot_read_another_users_file_by_its_name(server: LiveServer, store: Store, workspace: Path) -> None:
    alice, _ = store.add_user("alice")
    _, bob_token = store.add_user("bob")
    (own_folder(workspace, alice) / "plan.md").write_text("alice's plan")
    with api(server, bob_token) as client:
        missing = client.get("/files", params={"path": "plan.md"})
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "no file 'plan.md' in your workspace"


def test_a_folder_or_a_fifo_is_not_read_and_says_why(server: LiveServer, store: Store, workspace: Path) -> None:
    alice, token = store.add_user("alice")
    (own_folder(workspace, alice) / "docs").mkdir()
    os.mkfifo(own_folder(workspace, alice) / "pipe")  # opening it to read would block without O_NONBLOCK
    with api(server, token) as client:
        folder = client.get("/files", params={"path": "docs"})
        fifo = client.get("/files", params={"path": "pipe"})
        unauthorised = httpx2.get(f"{server.url}/api/v1/files", params={"path": "docs"}, timeout=60)
    assert (folder.status_code, folder.json()["error"]["code"]) == (422, "not_a_file")
    assert "is a folder" in folder.json()["error"]["message"]
    assert (fifo.status_code, fifo.json()["error"]["code"]) == (422, "not_a_file")
    assert unauthorised.status_code == 401


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({}, "path: Field required"),
        ({"path": ""}, "path: String should have at least 1 character"),
        ({"path": "a.txt", "limit": 0}, "limit: Input should be greater than or equal to 1"),
        ({"path": "a.txt", "limit": 2_000_000}, "limit: Input should be less than or equal to 1048576"),
    ],
)
def test_a_bad_preview_request_says_what_to_fix(
    server: LiveServer, store: Store, params: dict[str, Any], problem: str
) -> None:
    _, token = store.add_user("alice")
    with api(server, token) as client:
        refused = client.get("/files", params=params)
    assert refused.status_code == 422
    assert refused.json()["error"]["problems"] == [problem]


release = threading.Event()
"""Lets the 'stuck' subagent of `one_quick_one_stuck` complete."""


async def one_quick_one_stuck(request: ModelRequest) -> ModelResponse:
    """Lead: two subagents at once, then an answer. The 'quick' one completes at once; the
    'stuck' one waits until the test lets it go."""
    if "complete" in {t.name for t in request.tools}:
        if request.messages[0].text == "stuck":
            await asyncio.to_thread(release.wait, 30)
        return call("complete", summary=f"did {request.messages[0].text}")
    if request.messages[-1].role == "user":
        return respond(
            [
                ("task", {"subagent_type": "general-purpose", "description": "quick", "prompt": "quick"}),
                ("task", {"subagent_type": "general-purpose", "description": "stuck", "prompt": "stuck"}),
            ]
        )
    return reply("both done")


def test_a_running_run_shows_the_subagents_that_finished_so_far(server: LiveServer, store: Store) -> None:
    _, token = store.add_user("alice")
    release.clear()
    try:
        with api(server, token) as client:
            run_id = client.post("/runs", json={"prompt": "go"}).json()["run_id"]
            finished = poll(lambda: client.get(f"/runs/{run_id}").json()["subagents"])
            running = client.get(f"/runs/{run_id}").json()
            release.set()
            with client.stream("GET", f"/runs/{run_id}/events") as events:
                for _ in events.iter_lines():  # to its end
                    pass
            ended = client.get(f"/runs/{run_id}").json()
    finally:
        release.set()
    assert running["status"] == "running"
    assert [(s["description"], s["status"], s["summary"]) for s in finished] == [("quick", "completed", "did quick")]
    assert ended["status"] == "completed"
    assert [s["description"] for s in ended["subagents"]] == ["quick", "stuck"]


def poll(read: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """What `read` gives once it is not empty (a finished subagent is stored a transaction after it
    finished), polled until a deadline."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = read()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("the finished subagent was never stored")
