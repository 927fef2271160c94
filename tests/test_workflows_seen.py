"""A workflow seen as what it is (issue 36, item 7): the live tree groups its agents by phase with
counts, `delegate runs show` prints its phases and its script with the line each agent came from,
and its trace nests each agent under its phase under the workflow."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from delegate import RunLimits, Runtime
from delegate.cli._render import RunView
from delegate.run import _tracing
from delegate.workflows import Workflow
from tests.cli_support import run_cli
from tests.loopback_otlp import OTLPReceiver
from tests.test_tracing import collector as collector  # the loopback OTLP receiver (a fixture)
from tests.workflow_support import MAP_REVIEW_MERGE, by_task, files_args, summary_of

SMALL = """\
phase("gather")
found = parallel([call("find " + str(i), label="find " + str(i)) for i in range(3)])
phase("check")
checked = agent("check all", label="checker", acceptance=["file:README.md exists"])
len(found)
"""


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# project\n")
    return ws


async def test_the_live_tree_groups_a_workflows_agents_by_phase_with_counts(tmp_path: Path) -> None:
    view = RunView()
    limits = RunLimits(max_parallel=None)
    async with Runtime(model=by_task(summary_of), workspace=workspace(tmp_path), sinks=[view], limits=limits) as rt:
        result = await rt.run("", workflow=Workflow(script=MAP_REVIEW_MERGE, args=files_args(10)))
    assert result.status == "completed"
    console = Console(width=160, record=True)
    console.print(view.render())
    text = console.export_text()

    assert "phase summarise  10 agents: 10 completed" in text
    assert "phase review  20 agents: 19 completed, 1 error" in text
    review = text[text.index("phase review") :]
    assert "review B src/file7.txt" in review  # the one that did not complete is listed under its phase
    assert "... 19 more" in review  # the completed rest of a big phase is counted, not listed
    summarise = text[text.index("phase summarise") : text.index("phase review")]
    assert summarise.count("completed general-purpose: src/file") == 10  # a small phase lists each


async def test_runs_show_prints_the_phases_and_the_script_with_the_agents_each_line_started(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    async with Runtime(model=by_task(lambda t: "ok"), workspace=ws) as rt:
        result = await rt.run("", workflow=SMALL)
    assert result.status == "completed"

    shown = run_cli(["runs", "show", result.run_id, "--workspace", str(ws)])
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    line = "4 agents: 4 completed, 1 with every criterion holding, 0 with a criterion not holding, 0 failed"
    assert f"workflow completed: {line}" in out
    assert "phase gather: 3 agents: 3 completed (no acceptance criteria to check), 0 failed" in out
    assert "phase check: 1 agent: 1 completed, 1 with every criterion holding" in out
    assert "2 | found = parallel([" in out and "<- 3 agents: 3 completed" in out
    assert "4 | checked = agent(" in out and "<- 1 agent: 1 completed; 1 with every criterion holding" in out
    assert '1 | phase("gather")\n' in out  # a line that started nothing is shown bare
    checker = next(s for s in result.subagents if s.description == "checker")
    assert f"{checker.id} [completed] general-purpose: checker · phase check, line 4" in out


async def test_a_workflows_trace_nests_each_agent_under_its_phase_under_the_workflow(
    tmp_path: Path, collector: OTLPReceiver
) -> None:
    async with Runtime(model=by_task(lambda t: "ok"), workspace=workspace(tmp_path), store=False) as rt:
        result = await rt.run("check the project", workflow=SMALL)
    assert result.status == "completed"
    _tracing.flush_traces()

    workflow = collector.one("workflow check the project")
    assert workflow.parent_span_id == ""  # the run is the workflow: its root
    assert workflow.attributes["delegate.workflow.status"] == "completed"
    assert workflow.attributes["delegate.workflow.holding"] == 1  # completed is not read as "holds"
    assert workflow.attributes["delegate.workflow.completed"] == 4
    gather, check = collector.one("phase gather"), collector.one("phase check")
    assert gather.parent_span_id == check.parent_span_id == workflow.span_id
    agents = collector.named("invoke_agent general-purpose")
    assert len(agents) == 4
    assert sorted(a.parent_span_id == gather.span_id for a in agents) == [False, True, True, True]
    assert [a for a in agents if a.parent_span_id == check.span_id]
    assert gather.end_ns <= check.end_ns <= workflow.end_ns
