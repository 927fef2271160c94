"""A `delegate eval` killed mid-way (SIGKILL), then `delegate eval resume`: every attempt exactly
once, the attempts judged before the kill kept as they were, usage counted once."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from delegate import Store
from delegate.eval import Evals
from tests.cli_support import delegate, run_cli
from tests.durable_support import wait_for
from tests.eval_support import EXPECTED, REQUESTS, answer, write_suite
from tests.loopback_openai import OpenAIServer
from tests.test_batch_cli import env_for

MODEL = "openai:loopback-model"


def test_a_killed_eval_resumes_with_every_attempt_once_and_its_usage_counted_once(tmp_path: Path) -> None:
    suite = write_suite(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    log = tmp_path / "eval.log"
    args = ["eval", str(suite), "--repeat", "2", "--parallel", "3", "-m", MODEL, "-w", str(ws)]
    with OpenAIServer(answer(slow=1.0)) as server:
        env = env_for(server.base_url)
        with log.open("w") as out:
            proc = subprocess.Popen(delegate(*args), env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: "[2/12]" in log.read_text() or proc.poll() is not None, 120, "two attempts judged")
            assert proc.poll() is None, log.read_text()
            proc.kill()  # SIGKILL: nothing runs on the way out
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        found = re.search(r"eval (eval_\w+):", log.read_text())
        assert found is not None, log.read_text()
        eval_id = found.group(1)
        store = Store.for_workspace(ws)
        evals = Evals(store)
        before = evals.attempts(eval_id)
        judged = {a.key: (a.run_id, a.outcome) for a in before if a.outcome is not None}
        cut = [store.get_run(a.run_id) for a in before if a.outcome is None and a.run_id is not None]
        assert 2 <= len(judged) < 12
        assert any(run is not None and run.status == "interrupted" for run in cut)  # the slow one, mid-way

        resumed = run_cli(["eval", "resume", eval_id, "-w", str(ws), "--json"], env=env)

    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["status"] == "completed"
    after = evals.attempts(eval_id)
    assert len(after) == 12 and all(a.outcome is not None for a in after)
    assert {a.key: (a.run_id, a.outcome) for a in after if a.key in judged} == judged  # not run again
    tagged = [r for r in store.list_runs(limit=100) if r.eval is not None and r.eval["eval_id"] == eval_id]
    assert sorted(r.id for r in tagged) == sorted(a.run_id for a in after if a.run_id)  # one run an attempt
    for attempt in report["attempts"]:
        paid = REQUESTS[attempt["arm"], attempt["task"]]
        assert attempt["usage"]["input_tokens"] == 10 * paid and attempt["usage"]["output_tokens"] == 5 * paid
        run = store.get_run(attempt["run_id"])
        assert run is not None and run.usage.input_tokens == 10 * paid
    arms = {a["arm"]: a["succeeded"] for a in report["arms"]}
    assert arms == {arm: sum(EXPECTED[arm].values()) for arm in EXPECTED}
