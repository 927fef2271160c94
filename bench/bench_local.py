"""Ten small one-file tasks on the embedded model, with no key: does `delegate run` end well?

    python bench/bench_local.py [--only N,M,...] [--timeout 240]

Each task gets a fresh workspace holding one short document and runs as
`delegate run PROMPT --json` with no provider key in the environment (so the embedded SmolLM2-135M
runs it), one task at a time. The table says, per task: the wall time, the lead's steps, the
run's status and stop reason, whether the file the task asks for was written (and not empty), and
its first line. Below it: the median time, how many ended within 180 s with a JSON result, and
how many wrote their file. The issue's bar: every task ends within 180 s with a JSON result, and
at least two in three write their file with real content.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DOCS = {
    "rivers.md": "Rivers carry water from the hills to the sea. On the way they cut valleys, feed farms and "
    "carry boats, and their floods leave rich soil behind.\n",
    "bread.md": "To bake bread, mix flour, water, salt and yeast. Knead the dough for ten minutes. Let it rise "
    "for an hour. Shape the loaf, let it rise again, then bake it at 230 C for 35 minutes.\n",
    "meeting.md": "Notes of the Monday meeting. The team agreed to move the release to June, because the "
    "payment tests are not finished. Ana will write the test plan; Tom will tell the customers.\n",
    "bikes.md": "Bicycles are cheap to run, quiet and healthy. Cities that build safe bike lanes see more "
    "people cycling to work, less traffic and cleaner air.\n",
    "coffee.md": "Coffee grows on shrubs in warm hills near the equator. The red cherries are picked, dried "
    "or washed, and the beans inside are roasted. Brazil grows the most coffee in the world.\n",
    "story.md": "The old lighthouse keeper had not seen a ship in years. One stormy night a small boat "
    "appeared on the rocks, and he ran down with his lamp to guide it safely into the bay.\n",
    "repair.md": "To fix a flat tyre: take the wheel off, lever the tyre off the rim, find the hole in the "
    "tube, patch it, put the tube and tyre back, pump it up and refit the wheel.\n",
    "changelog.md": "Version 2.1 adds dark mode and an export to PDF. It fixes a crash when the network "
    "drops, and makes start-up twice as fast on old phones.\n",
    "trip.md": "Day one: fly to Lisbon and walk the old town. Day two: take the train to Sintra and visit "
    "the palaces. Day three: eat pastries in Belem and fly home.\n",
    "lab.md": "In the lab, always wear goggles and gloves. Label every bottle. Never eat or drink at the "
    "bench. Report any spill to the lab manager at once and clean it with the spill kit.\n",
}

TASKS: list[tuple[str, str]] = [
    ("Summarise docs/rivers.md in one sentence into summary.txt", "summary.txt"),
    ("Write the steps of docs/bread.md as a numbered list into steps.md", "steps.md"),
    ("Write a title for docs/meeting.md into title.txt", "title.txt"),
    ("Read docs/bikes.md and write a short summary of it to notes/bikes-summary.md", "notes/bikes-summary.md"),
    ("Make a bullet list of the key points of docs/coffee.md in points.md", "points.md"),
    ("Give docs/story.md a one-line title and save it as story-title.txt", "story-title.txt"),
    ("List the steps in docs/repair.md as a checklist in checklist.md", "checklist.md"),
    ("Put a two-sentence summary of docs/changelog.md into changes.txt", "changes.txt"),
    ("Write a headline for docs/trip.md into headline.md", "headline.md"),
    ("Summarise docs/lab.md for a newcomer into lab-summary.txt", "lab-summary.txt"),
]

TARGET_SECONDS = 180.0


@dataclass
class Outcome:
    prompt: str
    seconds: float
    steps: int | None
    status: str
    written: bool
    first_line: str


def run_task(prompt: str, target: str, timeout: float) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        workspace = Path(tmp)
        (workspace / "docs").mkdir()
        for name, text in DOCS.items():
            if f"docs/{name}" in prompt:
                (workspace / "docs" / name).write_text(text, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DELEGATE_MODEL"))}
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "delegate", "run", prompt, "--json", "-w", str(workspace)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            seconds = time.perf_counter() - started
            output = done.stdout
        except subprocess.TimeoutExpired:
            return Outcome(prompt, timeout, None, "killed (timeout)", False, "")
        try:
            result = json.loads(output.strip().splitlines()[-1])
            status = f"{result['status']} ({result.get('stop_reason')})"
            steps = result.get("steps")
        except (ValueError, IndexError, KeyError):
            status, steps = f"no JSON (exit {done.returncode})", None
        path = workspace / target
        written = path.is_file() and bool(path.read_text(encoding="utf-8", errors="replace").strip())
        first = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[0] if written else ""
        return Outcome(prompt, seconds, steps, status, written, first)


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| task | time | steps | status | file written? | its first line |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        first = o.first_line.replace("|", "\\|")
        first = first if len(first) <= 80 else first[:79] + "…"
        written = "yes" if o.written else "no"
        lines.append(f"| {o.prompt} | {o.seconds:.0f} s | {o.steps} | {o.status} | {written} | {first} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated task numbers (1-10) to run, e.g. 1,3")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds before a task is killed")
    args = parser.parse_args()
    chosen = [int(n) for n in args.only.split(",")] if args.only else list(range(1, len(TASKS) + 1))
    outcomes: list[Outcome] = []
    for number in chosen:
        prompt, target = TASKS[number - 1]
        outcome = run_task(prompt, target, args.timeout)
        print(f"[{number}] {outcome.seconds:.0f} s {outcome.status} written={outcome.written}", file=sys.stderr)
        outcomes.append(outcome)
    print(table(outcomes))
    times = [o.seconds for o in outcomes]
    in_time = sum(1 for o in outcomes if o.seconds <= TARGET_SECONDS and not o.status.startswith(("no JSON", "killed")))
    written = sum(o.written for o in outcomes)
    print(
        f"\nmedian {statistics.median(times):.0f} s (target {TARGET_SECONDS:.0f} s: median/target "
        f"{statistics.median(times) / TARGET_SECONDS:.2f}); ended within {TARGET_SECONDS:.0f} s with a JSON "
        f"result: {in_time} of {len(outcomes)}; wrote the file: {written} of {len(outcomes)}"
    )


if __name__ == "__main__":
    main()
