"""A real `delegate serve` (uvicorn on loopback) shared by two users, alice and bob, whose agents
are scripted: each one makes the tool calls a hostile user (or a prompt injection) would, and
answers with what every call gave back, so a test reads through the API what the agent could do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from delegate import RuntimeSettings, Store
from delegate._messages import ToolResultPart
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, reply, respond
from tests.loopback_server import LiveServer

Calls = list[tuple[str, dict[str, Any]]]


@dataclass
class Outcome:
    """What one tool call of a scripted agent gave back."""

    error: bool
    content: str


def acting(calls: Calls) -> FunctionModel:
    """A lead that makes `calls` in its first turn, then answers with their results as JSON."""

    def answer(request: ModelRequest) -> ModelResponse:
        results = [p for m in request.messages for p in m.parts if isinstance(p, ToolResultPart)]
        if not results:
            return respond(calls)
        return reply(json.dumps([{"error": r.is_error, "content": r.content} for r in results]))

    return FunctionModel(answer)


@dataclass
class Users:
    """The server, and each user's name, id, token and own workspace folder."""

    server: LiveServer
    workspace: Path
    ids: dict[str, str]
    tokens: dict[str, str]

    def folder(self, name: str) -> Path:
        return self.workspace / ".delegate" / "users" / self.ids[name]

    @contextmanager
    def api(self, name: str) -> Iterator[httpx2.Client]:
        headers = {"Authorization": f"Bearer {self.tokens[name]}"}
        with httpx2.Client(base_url=f"{self.server.url}/api/v1", headers=headers, timeout=60) as client:
            yield client

    def act(self, name: str, calls: Calls) -> list[Outcome]:
        """Run a scripted agent of `name` that makes `calls`; what each gave back, in order."""
        scripts[name_key(name, calls)] = calls
        with self.api(name) as api:
            started = api.post("/runs", json={"prompt": "act", "model": f"script:{name_key(name, calls)}"})
            assert started.status_code == 202, started.text
            run_id = started.json()["run_id"]
            with api.stream("GET", f"/runs/{run_id}/events") as events:
                for _ in events.iter_lines():
                    pass
            run = api.get(f"/runs/{run_id}").json()
        assert run["status"] == "completed", run
        return [Outcome(**o) for o in json.loads(run["final"])]


scripts: dict[str, Calls] = {}


def name_key(name: str, calls: Calls) -> str:
    return f"{name}-{abs(hash(json.dumps(calls, sort_keys=True)))}"


def model_for(spec: str | None) -> FunctionModel:
    if spec is None or not spec.startswith("script:"):
        return acting([])
    return acting(scripts[spec.removeprefix("script:")])


@contextmanager
def two_users(
    workspace: Path, store: Store, names: tuple[str, str] = ("alice", "bob"), **settings: Any
) -> Iterator[Users]:
    """`delegate serve` over `workspace` and `store`, with two users (alice and bob)."""
    ids: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for name in names:
        ids[name], tokens[name] = store.add_user(name)
    config = ServerSettings(
        runtime=RuntimeSettings(workspace=workspace, **settings), model=model_for, run_batches=False
    )
    with LiveServer(create_app(config, store=store)) as server:
        yield Users(server=server, workspace=workspace, ids=ids, tokens=tokens)
