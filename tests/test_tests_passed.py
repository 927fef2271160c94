"""`tests_passed:<command>` as DeerFlow's users expect it, or stronger: it holds only when the
command exits 0 *and* a test runner's own summary says tests ran and none failed; a fake summary,
a run that exits 0 while it reports failures, and a run that finds no tests never hold; when the
check cannot run the command here, the subagent's own recorded run of it is read, and the verdict
says so (spec audit row 106, acceptance)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from delegate import Workspace
from delegate._messages import Message, ToolCallPart, ToolResultPart
from delegate.subagents._acceptance import Verdict, check_criteria, snapshot_before
from delegate.subagents._test_summary import read_summaries
from delegate.workspace import CommandPolicy


@pytest.fixture
def unconfined(tmp_path: Path) -> Workspace:
    """Commands run as the operator's user with this interpreter (pytest and node as installed)."""
    return Workspace(root=tmp_path.resolve(), allow_commands=True, commands=CommandPolicy(sandbox=False))


async def one(ws: Workspace, criterion: str, transcript: list[Message] | None = None) -> Verdict:
    base = snapshot_before([criterion], ws)
    (verdict,) = await check_criteria([criterion], ws, base, transcript=transcript or [])
    return verdict


PY = sys.executable


async def test_a_real_pytest_run_with_passing_tests_holds_and_names_its_summary(unconfined: Workspace) -> None:
    (unconfined.root / "test_ok.py").write_text("def test_one():\n    assert 1\n\ndef test_two():\n    assert 2\n")
    verdict = await one(unconfined, f"tests_passed:{PY} -m pytest -q -p no:cacheprovider test_ok.py")
    assert verdict.result == "holds", verdict.evidence
    assert "pytest: 2 passed in" in verdict.evidence


async def test_a_real_pytest_run_with_a_failing_test_does_not_hold(unconfined: Workspace) -> None:
    (unconfined.root / "test_bad.py").write_text("def test_one():\n    assert 0\n\ndef test_two():\n    pass\n")
    verdict = await one(unconfined, f"tests_passed:{PY} -m pytest -q -p no:cacheprovider test_bad.py")
    assert verdict.result == "does not hold"
    assert verdict.evidence.startswith("exit 1 in ") and "pytest: 1 failed, 1 passed in" in verdict.evidence


async def test_a_run_that_exits_0_while_it_reports_failures_does_not_hold(unconfined: Workspace) -> None:
    (unconfined.root / "test_bad.py").write_text("def test_one():\n    assert 0\n")
    verdict = await one(unconfined, f"tests_passed:{PY} -m pytest -q -p no:cacheprovider test_bad.py || true")
    assert verdict.result == "does not hold"
    assert "but 1 test failed: pytest: 1 failed in" in verdict.evidence
    printed = await one(unconfined, "tests_passed:echo '=== 1 failed, 4 passed in 0.31s ==='")
    assert printed.result == "does not hold"


@pytest.mark.parametrize("fake", ["echo '12 passed'", "echo 'all tests passed'", "echo OK", "true"])
async def test_an_exit_0_without_a_runners_summary_never_holds(unconfined: Workspace, fake: str) -> None:
    verdict = await one(unconfined, f"tests_passed:{fake}")
    assert (verdict.result, verdict.checked) == ("UNVERIFIED", True)
    assert "shows no test runner's summary" in verdict.evidence


async def test_unittest_finding_no_tests_does_not_hold(unconfined: Workspace) -> None:
    verdict = await one(unconfined, f"tests_passed:{PY} -m unittest discover -s .")
    assert verdict.result == "does not hold"
    assert "no test ran" in verdict.evidence or verdict.evidence.startswith("exit 5")


async def test_a_real_unittest_run_holds(unconfined: Workspace) -> None:
    (unconfined.root / "test_u.py").write_text(
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertTrue(True)\n"
    )
    verdict = await one(unconfined, f"tests_passed:{PY} -m unittest test_u")
    assert verdict.result == "holds", verdict.evidence
    assert "unittest: Ran 1 test in" in verdict.evidence and "; OK" in verdict.evidence


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed here")
async def test_a_real_node_test_runner_run_holds_and_a_failing_one_does_not(unconfined: Workspace) -> None:
    (unconfined.root / "ok.test.mjs").write_text("import test from 'node:test';\ntest('one', () => {});\n")
    (unconfined.root / "bad.test.mjs").write_text(
        "import test from 'node:test';\nimport assert from 'node:assert';\ntest('one', () => assert.ok(false));\n"
    )
    good = await one(unconfined, "tests_passed:node --test ok.test.mjs")
    assert good.result == "holds", good.evidence
    assert "node --test: tests 1, pass 1, fail 0" in good.evidence
    bad = await one(unconfined, "tests_passed:node --test bad.test.mjs")
    assert bad.result == "does not hold"


GO_OK = """\
=== RUN   TestAdd
--- PASS: TestAdd (0.00s)
PASS
ok  \texample.com/calc\t0.002s
"""
GO_NONE = "ok  \texample.com/calc\t0.001s [no tests to run]\n?   \texample.com/cmd\t[no test files]\n"
GO_FAIL = "--- FAIL: TestAdd (0.00s)\n    calc_test.go:9: got 3\nFAIL\nFAIL\texample.com/calc\t0.003s\n"
CARGO = """\
running 3 tests
test tests::a ... ok
test tests::b ... ok
test tests::c ... ok

test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

   Doc-tests calc

running 0 tests

test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s
"""
JEST = "Test Suites: 1 failed, 1 total\nTests:       1 failed, 4 passed, 5 total\nSnapshots:   0 total\n"
VITEST = " \x1b[2m Test Files \x1b[22m \x1b[1m\x1b[32m1 passed\x1b[39m\x1b[22m (1)\n      Tests  4 passed (4)\n"
MOCHA = "  add\n    ✓ adds\n\n\n  2 passing (5ms)\n  1 failing\n"


@pytest.mark.parametrize(
    ("output", "runner", "ran", "failed"),
    [
        (GO_OK, "go test", 1, 0),  # a package that ran tests (go says no count without -v)
        (GO_NONE, "go test", 0, 0),
        (GO_FAIL, "go test", 2, 2),
        (CARGO, "cargo test", 3, 0),
        (JEST, "jest", 5, 1),
        (VITEST, "vitest", 4, 0),
        (MOCHA, "mocha", 3, 1),
    ],
)
def test_each_runners_own_summary_is_read(output: str, runner: str, ran: int, failed: int) -> None:
    summaries = read_summaries(output)
    assert {s.runner for s in summaries} == {runner}
    assert (sum(s.ran for s in summaries), sum(s.failed for s in summaries)) == (ran, failed)


def bash_run(call_id: str, command: str, result: str) -> list[Message]:
    return [
        Message(role="assistant", parts=[ToolCallPart(id=call_id, name="bash", arguments={"command": command})]),
        Message(role="tool", parts=[ToolResultPart(tool_call_id=call_id, name="bash", content=result)]),
    ]


async def test_without_commands_here_the_subagents_own_recorded_run_is_read_and_said(tmp_path: Path) -> None:
    ws = Workspace(root=tmp_path.resolve())
    transcript = [
        *bash_run("c1", "pytest -q", "1 failed, 2 passed in 0.40s\n[exit code 1]"),
        *bash_run("c2", "pytest   -q", "3 passed in 0.31s\n[exit code 0]"),  # the last run of it decides
    ]
    verdict = await one(ws, "tests_passed:pytest -q", transcript)
    assert verdict == Verdict(
        "tests_passed:pytest -q",
        "holds",
        "not run by the check (commands are not allowed in this workspace); read from the subagent's own run of it "
        "(call c2): exit 0 — pytest: 3 passed in 0.31s",
        checked=True,
    )


async def test_a_recorded_run_of_another_command_or_a_fake_is_no_evidence(tmp_path: Path) -> None:
    ws = Workspace(root=tmp_path.resolve())
    other = bash_run("c1", "echo '3 passed in 0.1s'; # pytest -q", "3 passed in 0.1s\n[exit code 0]")
    verdict = await one(ws, "tests_passed:pytest -q", other)
    assert (verdict.result, verdict.checked) == ("UNVERIFIED", False)
    assert verdict.evidence.endswith("the subagent has no run of this command on record")
    refused = bash_run("c2", "pytest -q", "the command was not run: it is not allowed")
    assert (await one(ws, "tests_passed:pytest -q", refused)).result == "does not hold"


async def test_a_command_the_permission_rules_refuse_is_not_run_by_the_check(unconfined: Workspace) -> None:
    base = snapshot_before(["tests_passed:touch ran.txt"], unconfined)
    (verdict,) = await check_criteria(
        ["tests_passed:touch ran.txt"], unconfined, base, refusal=lambda command: "deny Bash(touch:*)"
    )
    assert not (unconfined.root / "ran.txt").exists()
    assert verdict.result == "UNVERIFIED" and "permission rules do not let it run unasked" in verdict.evidence
