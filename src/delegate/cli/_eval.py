"""`delegate eval`: compare run configurations (arms) on a suite of tasks judged in code.

`delegate eval SUITE ...` is `delegate eval run SUITE ...`; `resume`, `show`, `list` and
`compare` are the other commands (see docs/eval.md).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from ._common import (
    LOCAL_TIMEOUT,
    Db,
    OperatorFlags,
    Workspace,
    default_model,
    fail,
    open_store,
    operator_flags,
    read_store,
    run_until_done,
)

if TYPE_CHECKING:
    from .._store import Store
    from ..eval import Arm, ArmSummary, AttemptKey, EvalReport, Evals, Evaluation


class _RunByDefault(TyperGroup):
    """A group whose first word, when it is no command, is the suite of `run`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click.Context
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


eval_app = typer.Typer(
    cls=_RunByDefault,
    help="Evaluations: arms (run configurations) compared on a suite of tasks judged in code (docs/eval.md).",
    no_args_is_help=True,
)

PANEL = "Evaluation"
AsJson = Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")]
Html = Annotated[
    Path | None, typer.Option("--html", metavar="FILE", help="Write the report as a standalone HTML page.")
]
Parallel = Annotated[int, typer.Option("--parallel", min=1, help="Attempts running at once.", rich_help_panel=PANEL)]
EvalId = Annotated[str | None, typer.Argument(metavar="EVAL_ID", help="The eval (default: the latest).")]


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")


@eval_app.command("run")
@operator_flags
def eval_run(
    suite: Annotated[
        str,
        typer.Argument(
            metavar="SUITE", help="A suite folder, a .yaml or .jsonl file, or a shipped suite's name (sample)."
        ),
    ],
    arm: Annotated[
        list[str] | None,
        typer.Option(
            "--arm",
            metavar="NAME=OPTIONS",
            help="An arm: single, delegation or workflow=NAME|FILE, and model=, subagent_model=, agents=, max_steps=, "
            "token_budget=, cost_budget=, timeout=, max_parallel= (repeat for more; default: the suite's, else "
            "single and delegation).",
            rich_help_panel=PANEL,
        ),
    ] = None,
    repeat: Annotated[
        int | None, typer.Option("--repeat", min=1, help="Attempts of each task by each arm.", rich_help_panel=PANEL)
    ] = None,
    equal_budget: Annotated[
        str | None,
        typer.Option(
            "--equal-budget",
            metavar="tokens|cost[=N]",
            help="Give every arm the same per-task budget: N, else the smallest any arm (or a flag) sets.",
            rich_help_panel=PANEL,
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="The model of arms that name none.")] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0.001, help="Seconds each attempt may take.")
    ] = None,
    token_budget: Annotated[
        int | None, typer.Option("--token-budget", min=1, help="Tokens each attempt may spend.")
    ] = None,
    cost_budget: Annotated[
        float | None, typer.Option("--cost-budget", min=0.000001, help="US dollars each attempt may spend.")
    ] = None,
    parallel: Parallel = 4,
    as_json: AsJson = False,
    html: Html = None,
    workspace: Workspace = Path("."),
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Run every task of SUITE with every arm, --repeat times, each attempt an ordinary run judged in code."""
    flags.embedded_only("eval run")
    from .._errors import UserError
    from ..eval import Evaluation, default_arms, load_suite, parse_arm_option

    try:
        loaded = load_suite(suite)
        base = Path.cwd()  # an --arm names its files from where the command runs
        arms = tuple(parse_arm_option(a, base) for a in arm) if arm else (loaded.arms or default_arms())
    except UserError as exc:
        fail(str(exc))
    model = model or (default_model(None, what="its attempts") if not all(a.model for a in arms) else None)
    local = (model or "") == "local" or any(a.model == "local" for a in arms)
    timeout = timeout if timeout is not None else (LOCAL_TIMEOUT if local else None)
    arms = tuple(_folded(a, model, timeout, token_budget, cost_budget) for a in arms)
    budget = None
    if equal_budget is not None:
        kind, _, value = equal_budget.partition("=")
        try:
            budget, arms = equal_budget_of(kind.strip(), value, arms)
        except UserError as exc:
            fail(str(exc))
    settings = flags.settings(workspace, model=model)
    store = open_store(workspace, db)
    evaluation = Evaluation.create(
        store,
        loaded,
        arms,
        _factory(settings, store),
        _root(settings.root),
        repeat=repeat or loaded.repeat or 1,
        budget=budget,
        max_parallel=parallel,
        on_attempt=_progress(len(loaded.tasks) * len(arms) * (repeat or loaded.repeat or 1)),
    )
    typer.echo(f"eval {evaluation.id}: {len(loaded.tasks)} tasks x {len(arms)} arms", err=True)
    _finish(evaluation, as_json, html)


def equal_budget_of(kind: str, value: str, arms: tuple[Arm, ...]) -> tuple[Any, tuple[Arm, ...]]:
    from .._config import RunLimits
    from .._errors import UserError
    from ..eval import equal_budget

    try:
        number = float(value) if value.strip() else None
    except ValueError:
        raise UserError(f"--equal-budget {kind}={value}: give a number") from None
    return equal_budget(kind, number, arms, RunLimits(token_budget=None))


@eval_app.command("resume")
@operator_flags
def eval_resume(
    eval_id: Annotated[str, typer.Argument(metavar="EVAL_ID", help="The eval to go on with.")],
    parallel: Parallel = 4,
    as_json: AsJson = False,
    html: Html = None,
    workspace: Workspace = Path("."),
    db: Db = None,
    *,
    flags: OperatorFlags,
) -> None:
    """Go on with an eval whose process died: judged attempts are kept, interrupted runs resume,
    only attempts that never started start."""
    flags.embedded_only("eval resume")
    from .._errors import UserError
    from ..eval import Evaluation

    settings = flags.settings(workspace)
    store = open_store(workspace, db)
    try:
        evaluation = Evaluation.open(
            store, eval_id, _factory(settings, store), _root(settings.root), max_parallel=parallel
        )
    except UserError as exc:
        fail(str(exc))
    evaluation.on_attempt = _progress(len(evaluation.tasks) * len(evaluation.arms) * int(evaluation.row.spec["repeat"]))
    _finish(evaluation, as_json, html)


@eval_app.command("show")
def eval_show(
    eval_id: EvalId = None, as_json: AsJson = False, html: Html = None, workspace: Workspace = Path("."), db: Db = None
) -> None:
    """Show an eval's report (a table; --json; --html FILE)."""
    evals, row_id = _stored(workspace, db, eval_id)
    _print(_report(evals, row_id), as_json, html)


@eval_app.command("list")
def eval_list(as_json: AsJson = False, workspace: Workspace = Path("."), db: Db = None) -> None:
    """List the evals, newest first."""
    from ..eval import Evals, build_report

    store = read_store(workspace, db)
    rows = Evals(store).list() if store is not None else []
    found = [build_report(r, Evals(store).attempts(r.id)) for r in rows] if store is not None else []
    if as_json:
        typer.echo(json.dumps([_line(r) for r in found]))
        return
    for report in found:
        line = _line(report)
        typer.echo(f"{line['eval_id']}\t{line['status']}\t{line['suite']}\t{line['created_at']}\t{line['arms']}")


@eval_app.command("compare")
def eval_compare(
    a: Annotated[str, typer.Argument(metavar="A", help="An arm of the eval, or EVAL_ID:ARM.")],
    b: Annotated[str, typer.Argument(metavar="B", help="Another arm, or EVAL_ID:ARM.")],
    eval_id: Annotated[str | None, typer.Option("--eval", help="The eval of bare arm names (default: latest).")] = None,
    as_json: AsJson = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Say which differences between two arms are larger than the noise (success, tokens, cost, time)."""
    from ..eval import compare, render_comparison

    evals, default = _stored(workspace, db, eval_id)
    sides: list[ArmSummary] = []
    for given in (a, b):
        owner, sep, name = given.rpartition(":")
        report = _report(evals, owner if sep else default)
        side = next((s for s in report.arms if s.name == name), None)
        if side is None:
            fail(f"eval {report.eval_id} has no arm {name!r}: its arms are {', '.join(s.name for s in report.arms)}")
        sides.append(side)
    found = compare(sides[0], sides[1])
    typer.echo(json.dumps(found) if as_json else render_comparison(found))


def _folded(arm: Arm, model: str | None, timeout: float | None, tokens: int | None, cost: float | None) -> Arm:
    """An arm with the command's model and limits where it names none (kept with the eval, so a
    resume runs the attempts under them)."""
    return replace(
        arm,
        model=arm.model or model,
        timeout=arm.timeout or timeout,
        token_budget=arm.token_budget or tokens,
        cost_budget=arm.cost_budget or cost,
    )


def _factory(settings: Any, store: Store) -> Any:
    from ..run import attempt_factory

    return attempt_factory(settings, store)


def _root(workspace: Path) -> Path:
    """Where attempts' folders are: in the store's folder, out of every other run's reach."""
    return workspace / ".delegate" / "evals"


def _progress(total: int) -> Any:
    done = [0]

    def show(key: AttemptKey, outcome: dict[str, Any]) -> None:
        done[0] += 1
        verdict = "succeeded" if outcome["succeeded"] else f"failed ({outcome['status']})"
        usage = outcome["usage"]
        tokens = usage["input_tokens"] + usage["output_tokens"]
        typer.echo(f"[{done[0]}/{total}] {key.arm} {key.task} #{key.attempt}: {verdict}, {tokens:,} tokens", err=True)

    return show


def _finish(evaluation: Evaluation, as_json: bool, html: Path | None) -> None:
    try:
        report = run_until_done(evaluation.run)
    except KeyboardInterrupt:
        fail(f"stopped: `delegate eval resume {evaluation.id}` goes on without paying again", 1)
    _print(report, as_json, html)
    if report.status != "completed":
        fail(f"eval {report.eval_id} is unfinished: some attempts run in another process", 1)


def _print(report: EvalReport, as_json: bool, html: Path | None) -> None:
    from ..eval import render_html, render_table

    if html is not None:
        html.write_text(render_html(report), encoding="utf-8")
        typer.echo(f"report written to {html}", err=True)
    typer.echo(json.dumps(report.to_dict()) if as_json else render_table(report))


def _stored(workspace: Path, db: str | None, eval_id: str | None) -> tuple[Evals, str]:
    from ..eval import Evals

    store = read_store(workspace, db)
    if store is None:
        fail("no evals here: run one with `delegate eval SUITE`")
    evals = Evals(store)
    row = evals.get(eval_id) if eval_id else evals.latest()
    if row is None:
        fail(f"no eval {eval_id!r}: list them with `delegate eval list`" if eval_id else "no evals yet")
    return evals, row.id


def _report(evals: Evals, eval_id: str) -> EvalReport:
    from ..eval import build_report

    row = evals.get(eval_id)
    if row is None:
        fail(f"no eval {eval_id!r}: list them with `delegate eval list`")
    return build_report(row, evals.attempts(eval_id))


def _line(report: EvalReport) -> dict[str, Any]:
    rates = {a.name: f"{a.succeeded}/{a.judged}" for a in report.arms}
    return {
        "eval_id": report.eval_id,
        "suite": report.name,
        "status": report.status,
        "created_at": report.created_at,
        "arms": rates,
    }
