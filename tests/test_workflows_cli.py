"""Workflows through the real CLI, against the loopback OpenAI-compatible server: `delegate
workflow run` and `delegate run --workflow`."""

from __future__ import annotations

import json
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
