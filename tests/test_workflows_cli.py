"""Workflows through the real CLI, against the loopback OpenAI-compatible server: `delegate
workflow run`, `delegate run --workflow`, and SIGKILLs at random moments of a 200-agent workflow
resumed with `delegate run --resume` until it ends as an uninterrupted run does (SQLite and
PostgreSQL)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.cli_support import delegate, run_cli
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.test_batch_cli import env_for
from tests.workflow_support import MAP_REVIEW_MERGE, files_args

MODEL = "openai:loopback-model"


def first_user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def reviewing(latency: float = 0.0):
    """Every agent completes; the second review of a file whose number ends in 7 fails (a 400)."""

    def answer(body: dict[str, Any]) -> Reply | Fault:
        if latency:
            time.sleep(latency)
        task = first_user(body)
        if task.startswith("review B") and task.rstrip().endswith("7.txt"):
            return Fault(400, "the reviewer's model refuses")
        return Reply(
            tool_calls=[("complete", {"summary": f"done: {task[:40]}"})], prompt_tokens=12, completion_tokens=3
        )

    return answer


def workspace_for(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "README.md").write_text("# project\n")
    return ws


def args_options(args: dict[str, Any]) -> list[str]:
    return [option for key, value in args.items() for option in ("--arg", f"{key}={json.dumps(value)}")]


def test_workflow_run_completes_a_300_agent_map_review_merge_with_the_right_counts(tmp_path: Path) -> None:
    ws = workspace_for(tmp_path)
    script = tmp_path / "mrm.py"
    script.write_text(MAP_REVIEW_MERGE)
    with OpenAIServer(reviewing()) as server:
        done = run_cli(
            [
                "workflow",
                "run",
                str(script),
                "-m",
                MODEL,
                "--workspace",
                str(ws),
                "--max-parallel",
                "64",
                "--json",
                *args_options(files_args(100)),
            ],
            env=env_for(server.base_url),
            timeout=300,
        )

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    line = "300 agents: 290 completed, 96 with every criterion holding, 4 with a criterion not holding, 10 failed"
    assert out["status"] == "completed" and out["workflow"]["line"] == line
    assert out["final"].startswith(line)
    assert out["result"] == {"accepted": 90, "summaries": 100}
    assert len(out["subagents"]) == 300 and out["usage"]["input_tokens"] == 290 * 12

    shown = run_cli(["runs", "show", out["run_id"], "--json", "--workspace", str(ws)])
    assert json.loads(shown.stdout)["workflow"]["line"] == line


def test_run_with_workflow_takes_a_prompt_as_its_description_and_reads_the_script_from_stdin(tmp_path: Path) -> None:
    ws = workspace_for(tmp_path)
    with OpenAIServer(reviewing()) as server:
        done = subprocess.run(
            delegate("run", "check two files", "--workflow", "-", "-m", MODEL, "--workspace", str(ws), "--json"),
            input='r = parallel(["a", "b"])\n[x["summary"] for x in r]\n',
            env=env_for(server.base_url),
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["result"] == ["done: a", "done: b"]
    assert out["workflow"]["line"].startswith("2 agents: 2 completed")


def test_a_script_that_fails_exits_1_saying_its_line(tmp_path: Path) -> None:
    ws = workspace_for(tmp_path)
    script = tmp_path / "bad.py"
    script.write_text('x = 1\nopen("/etc/passwd")\n')
    with OpenAIServer(reviewing()) as server:
        done = run_cli(
            ["workflow", "run", str(script), "-m", MODEL, "--workspace", str(ws)], env=env_for(server.base_url)
        )

    assert done.returncode == 1
    assert "line 2: PermissionError" in done.stdout + done.stderr


def test_an_unknown_workflow_file_is_bad_usage(tmp_path: Path) -> None:
    done = run_cli(["workflow", "run", str(tmp_path / "nope.py"), "--workspace", str(tmp_path)])

    assert done.returncode == 2
    assert "no workflow file" in done.stderr and "map-review-merge" in done.stderr


KILLED_WORKFLOW = """\
phase("map")
firsts = parallel([call("map " + str(i), label="m" + str(i)) for i in range(100)])
phase("reduce")
seconds = pipeline(range(100), lambda i: call("reduce " + str(i), label="r" + str(i)))
[len([x for x in firsts if x]), len([x for x in seconds if x])]
"""


def completing(latency: float):
    def answer(body: dict[str, Any]) -> Reply:
        time.sleep(latency)
        task = first_user(body)
        return Reply(tool_calls=[("complete", {"summary": f"did {task}"})], prompt_tokens=12, completion_tokens=3)

    return answer


def kill_at_random(args: list[str], env: dict[str, str], rng: random.Random, most: float) -> bool:
    """Start `delegate ARGS`, SIGKILL it after a random moment (up to `most` seconds); True if it
    ended by itself first."""
    proc = subprocess.Popen(delegate(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=rng.uniform(0.3, most))
        return True
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def run_id_of(ws: Path, env: dict[str, str]) -> str | None:
    listed = run_cli(["runs", "list", "--json", "--workspace", str(ws)], env=env)
    runs = json.loads(listed.stdout or "[]")
    return runs[0]["run_id"] if runs else None


def test_sigkills_at_random_moments_then_resume_end_as_an_uninterrupted_run(tmp_path: Path, store_url: str) -> None:
    rng = random.Random(36)
    script = tmp_path / "wf.py"
    script.write_text(KILLED_WORKFLOW)
    with OpenAIServer(completing(0.02)) as server:
        base = ["-m", MODEL, "--max-parallel", "32"]
        clean_ws = workspace_for(tmp_path / "clean")
        env = env_for(server.base_url)  # the uninterrupted run: a store of its own, in its workspace
        clean = run_cli(["workflow", "run", str(script), *base, "--workspace", str(clean_ws), "--json"], env=env)
        assert clean.returncode == 0, clean.stderr
        expected = json.loads(clean.stdout)

        ws = workspace_for(tmp_path / "killed")
        env = env_for(server.base_url, store_url)
        kills = 0
        ended = kill_at_random(["workflow", "run", str(script), *base, "--workspace", str(ws)], env, rng, 2.0)
        kills += not ended
        run_id = run_id_of(ws, env)
        while run_id is None:  # killed before the run was stored: start again
            ended = kill_at_random(["workflow", "run", str(script), *base, "--workspace", str(ws)], env, rng, 3.0)
            kills += not ended
            run_id = run_id_of(ws, env)
        while kills < 20 and not ended:
            ended = kill_at_random(["run", "--resume", run_id, "--workspace", str(ws)], env, rng, 2.5)
            kills += not ended
        final = run_cli(["run", "--resume", run_id, "--workspace", str(ws), "--json"], env=env, timeout=300)
        if final.returncode != 0 and "ended" in final.stderr:  # it ended during the last attempt
            final = run_cli(["runs", "show", run_id, "--workspace", str(ws), "--json"], env=env)

    assert kills >= 20
    out = json.loads(final.stdout)
    assert out["status"] == "completed"
    assert out["result"] == expected["result"] == [100, 100]
    assert out["workflow"]["counts"] == expected["workflow"]["counts"]
    assert out["usage"]["input_tokens"] == expected["usage"]["input_tokens"] == 200 * 12  # each answer counted once
    assert out["usage"]["requests"] == 200
    assert sorted(s["description"] for s in out["subagents"]) == sorted(s["description"] for s in expected["subagents"])
