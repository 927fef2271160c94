"""Evaluations: does delegating pay on your own tasks? Arms (run configurations) compared on a
suite of tasks judged in code, every attempt an ordinary run (see docs/eval.md).

`delegate eval SUITE --arm NAME=OPTIONS ...` is the face users meet; this package is what it runs:
the suite format (`_suite.py`), arms (`_arms.py`), the durable evaluation (`_evaluation.py`, over
its tables in `_store.py`), the judgement in code (`_judge.py`), the report and its statistics
(`_report.py`, `_compare.py`) and the standalone HTML report (`_html.py`).
"""

from ._arms import Arm, default_arms, parse_arm_option
from ._compare import compare, render_comparison
from ._evaluation import AttemptFactory, AttemptRuntime, Budget, Evaluation, equal_budget
from ._html import render_html
from ._judge import check_answer, judge
from ._report import ArmSummary, EvalReport, build_report, render_table, wilson
from ._store import EVAL_MIGRATIONS, AttemptKey, AttemptRow, EvalRow, Evals
from ._suite import AnswerChecks, Suite, Task, load_suite, shipped_suites

__all__ = [
    "EVAL_MIGRATIONS",
    "AnswerChecks",
    "Arm",
    "ArmSummary",
    "AttemptFactory",
    "AttemptKey",
    "AttemptRow",
    "AttemptRuntime",
    "Budget",
    "EvalReport",
    "EvalRow",
    "Evals",
    "Evaluation",
    "Suite",
    "Task",
    "build_report",
    "check_answer",
    "compare",
    "default_arms",
    "equal_budget",
    "judge",
    "load_suite",
    "parse_arm_option",
    "render_comparison",
    "render_html",
    "render_table",
    "shipped_suites",
    "wilson",
]
