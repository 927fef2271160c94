"""What a catalogue of subagent types costs: the lead's first request, and building the catalogue.

    python bench/bench_catalogue.py            # 3, 50, 150, 500 agents (+ 12 skills); build time at 500
    python bench/bench_catalogue.py --quick    # fewer repeats

The agents are generated in the shape of public Claude Code collections (a ~300-character
description with an unquoted `Triggers on: 'x', 'y'`, so every file takes the line-by-line path,
`tools: Read, Grep, Glob`, `model: sonnet`), beside 12 skills with Anthropic-style descriptions.
The first request is the JSON body the `openai:` adapter sends to a loopback Chat Completions
server; its size is compared with the built-in types alone (the baseline, measured in the same
run). Build time is the median of repeated `Catalogue.build` calls over the 500 files, against the
median over 3 files.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.loopback_openai

from tests.loopback_openai import OpenAIServer, Reply

from delegate import Catalogue, Runtime
from delegate.models import OpenAIModel, RetryPolicy

SIZES = (3, 50, 150, 500)
SKILLS = 12


def write_agents(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"agent-{i:03}.md").write_text(
            f"---\nname: specialist-{i:03}\n"
            f"description: Expert number {i} in domain {i % 17} engineering, with deep knowledge of its tools, "
            f"pitfalls and conventions. Use PROACTIVELY for topic{i} work: reviews, migrations, performance "
            f"tuning and incident follow-ups in topic{i} codebases. Triggers on: 'topic{i}', 'area {i}', 'review'\n"
            "tools: Read, Grep, Glob, WebFetch\nmodel: sonnet\n---\nYou are a specialist. Work carefully.\n"
        )


def write_skills(folder: Path, count: int) -> None:
    for i in range(count):
        (folder / f"skill-{i}").mkdir(parents=True, exist_ok=True)
        (folder / f"skill-{i}" / "SKILL.md").write_text(
            f"---\nname: skill-{i}\ndescription: Comprehensive toolkit number {i} for documents of kind {i}: "
            "extracting text and tables, creating new documents, merging and splitting them. Use when the task "
            f"needs kind-{i} documents processed, generated or analysed at scale.\nlicense: see LICENSE.txt\n"
            "---\n# Steps\n"
        )


def first_request(workspace: Path) -> dict[str, Any]:
    def answer(body: dict[str, Any]) -> Reply:
        return Reply(content="done")

    with OpenAIServer(answer) as server:
        model = OpenAIModel("bench", base_url=server.base_url, api_key="k", retry=RetryPolicy(attempts=1))
        Runtime(model=model, workspace=workspace, store=False).run_sync("Say hello.")
    return server.requests[0]


def size(body: dict[str, Any]) -> int:
    return len(json.dumps(body).encode())


def task_size(body: dict[str, Any]) -> int:
    task = next(t for t in body["tools"] if t["function"]["name"] == "task")
    return len(json.dumps(task).encode())


def build_time(workspace: Path, repeats: int) -> float:
    times: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        Catalogue.build(workspace=workspace)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats of the build timing")
    args = parser.parse_args()
    repeats = 5 if args.quick else 15
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "builtin"
        base.mkdir()
        baseline = size(first_request(base))
        print(f"first request with the built-in types alone: {baseline / 1000:.1f} KB")
        print(f"{'agents':>7} {'skills':>6} {'first request':>14} {'task tool':>10} {'vs built-ins':>13}")
        workspaces: dict[int, Path] = {}
        for count in SIZES:
            ws = Path(tmp) / f"ws{count}"
            write_agents(ws / ".claude" / "agents", count)
            write_skills(ws / ".claude" / "skills", SKILLS)
            workspaces[count] = ws
            body = first_request(ws)
            print(
                f"{count:>7} {SKILLS:>6} {size(body) / 1000:>11.1f} KB {task_size(body) / 1000:>7.1f} KB "
                f"{size(body) / baseline:>12.2f}x"
            )
        small, large = build_time(workspaces[3], repeats), build_time(workspaces[500], repeats)
        print(
            f"Catalogue.build, median of {repeats}: {small * 1000:.1f} ms at 3 agents, {large * 1000:.1f} ms at 500 "
            f"({large / small:.0f}x; {large / 500 * 1e6:.0f} µs per file)"
        )


if __name__ == "__main__":
    main()
