"""SIGKILLs at random moments of a workflow run by the real CLI, each resumed with `delegate run
--resume`: it ends as an uninterrupted run does, each agent's work done and its usage counted
once, on SQLite and PostgreSQL. A few kills here (under 20 s a store); `bench/soak_workflow_kills.py`
runs 20 and more on 200 agents (figures in docs/workflows.md)."""

from __future__ import annotations

from pathlib import Path

from delegate import Store
from tests.loopback_openai import OpenAIServer
from tests.test_batch_cli import env_for
from tests.workflow_kills import completing, expected, killed_workflow, outcome, soak

N = 15
"""Agents a phase: 30 in all."""


def test_sigkills_at_random_moments_then_resume_end_as_an_uninterrupted_run(tmp_path: Path, store_url: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "wf.py"
    script.write_text(killed_workflow(N))
    with OpenAIServer(completing(0.1)) as server, Store.open(store_url) as store:
        env = env_for(server.base_url, store_url)
        done, out = soak(ws, script, env, store, kills=3, total=2 * N, parallel=4, seed=36)

    assert done.kills == 3, done
    assert out["status"] == "completed"
    assert outcome(out) == expected(N)  # every agent's work once, its usage once
    assert sum(a["replayed"] for a in out["workflow"]["agents"]) >= done.finished_at_kill[-1]
