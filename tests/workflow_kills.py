"""SIGKILLs at random moments of a workflow run by the real CLI, each followed by `delegate run
--resume`, until it ends: what `tests/test_workflows_kills.py` does with a few kills and
`bench/soak_workflow_kills.py` with 20 and more (issue 36: "SIGKILLs at random moments of a
200-agent workflow, then --resume, end equal to an uninterrupted run with usage counted once").

Each kill lands in the middle of the work: the killer waits until the store holds a random
number of finished agents (more than the attempt began with, fewer than all), then kills.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delegate import Store
from tests.cli_support import delegate, run_cli
from tests.loopback_openai import Reply

MODEL = "openai:loopback-model"
PROMPT_TOKENS, COMPLETION_TOKENS = 12, 3


def killed_workflow(n: int) -> str:
    """`n` agents in a map phase (one `parallel()`), then `n` in a reduce phase (a `pipeline()`)."""
    return f"""\
phase("map")
firsts = parallel([call("map " + str(i), label="m" + str(i)) for i in range({n})])
phase("reduce")
seconds = pipeline(range({n}), lambda i: call("reduce " + str(i), label="r" + str(i)))
[len([x for x in firsts if x]), len([x for x in seconds if x])]
"""


def completing(latency: float):
    """Every agent completes after `latency` seconds, with the same usage whoever asks."""

    def answer(body: dict[str, Any]) -> Reply:
        time.sleep(latency)
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        done = {"summary": f"did {task}"}
        return Reply(tool_calls=[("complete", done)], prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS)

    return answer


@dataclass
class Soak:
    """The killed run: its id, how many kills landed, and the agents finished before each."""

    run_id: str | None = None
    kills: int = 0
    finished_at_kill: list[int] = field(default_factory=list[int])


def _finished(store: Store, run_id: str | None) -> int:
    if run_id is None:
        return 0
    return sum(1 for r in store.subagent_records(run_id) if r.status == "completed")


def _run_id(store: Store) -> str | None:
    runs = store.list_runs(None)
    return runs[0].id if runs else None


def _kill_mid_work(
    args: list[str], env: dict[str, str], store: Store, soak: Soak, total: int, step: int, rng: random.Random
) -> bool:
    """Start `delegate ARGS`; SIGKILL it once more agents finished than when it began (a random
    number of them, up to `step` more, short of all); True if it ended by itself first."""
    before = _finished(store, soak.run_id)
    target = min(before + rng.randint(1, step), max(before + 1, total - 1))
    proc = subprocess.Popen(delegate(*args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            soak.run_id = soak.run_id or _run_id(store)
            if _finished(store, soak.run_id) >= target:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                soak.kills += 1
                soak.finished_at_kill.append(_finished(store, soak.run_id))
                return False
            time.sleep(0.02)
        return proc.poll() is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def soak(
    ws: Path, script: Path, env: dict[str, str], store: Store, *, kills: int, total: int, parallel: int, seed: int
) -> tuple[Soak, dict[str, Any]]:
    """Run `script` in `ws` (`parallel` agents at once), SIGKILLed `kills` times at random moments,
    each time resumed with `delegate run --resume`, then resumed to its end; give back the soak
    and `runs show --json`."""
    rng = random.Random(seed)
    state = Soak()
    step = max(1, total // (kills + 2))  # the kills spread over the work, short of its end
    base = ["-m", MODEL, "--max-parallel", str(parallel), "--workspace", str(ws)]
    ended = _kill_mid_work(["workflow", "run", str(script), *base], env, store, state, total, step, rng)
    while state.kills < kills and not ended:
        assert state.run_id is not None, "the killed workflow was never stored"
        resume = ["run", "--resume", state.run_id, "--workspace", str(ws)]
        ended = _kill_mid_work(resume, env, store, state, total, step, rng)
    assert state.run_id is not None
    if not ended:  # `run --resume --json` prints what `runs show --json` does
        final = run_cli(["run", "--resume", state.run_id, "--workspace", str(ws), "--json"], env=env, timeout=600)
        assert final.returncode == 0, final.stderr
        return state, json.loads(final.stdout)
    shown = run_cli(["runs", "show", state.run_id, "--workspace", str(ws), "--json"], env=env)
    return state, json.loads(shown.stdout)


def expected(n: int) -> dict[str, Any]:
    """What an uninterrupted run of `killed_workflow(n)` ends with."""
    return {
        "result": [n, n],
        "counts": {"agents": 2 * n, "completed": 2 * n, "failed": 0, "not_started": 0},
        "input_tokens": 2 * n * PROMPT_TOKENS,
        "requests": 2 * n,
        "descriptions": sorted([f"m{i}" for i in range(n)] + [f"r{i}" for i in range(n)]),
    }


def outcome(out: dict[str, Any]) -> dict[str, Any]:
    """The same keys as `expected`, from a run's `runs show --json`."""
    counts = out["workflow"]["counts"]
    return {
        "result": out["result"],
        "counts": {k: counts[k] for k in ("agents", "completed", "failed", "not_started")},
        "input_tokens": out["usage"]["input_tokens"],
        "requests": out["usage"]["requests"],
        "descriptions": sorted(s["description"] for s in out["subagents"]),
    }
