"""What memory costs: `memory_search` over 100,000 notes, and what the memory and todo tools add to
a subagent's first request.

    python bench/bench_memory.py                  # SQLite, and PostgreSQL when DELEGATE_TEST_PG is set
    python bench/bench_memory.py --notes 20000    # a smaller store
    DELEGATE_TEST_PG=postgresql://postgres@127.0.0.1:55432/delegate_test python bench/bench_memory.py

Search: one user's notes in one workspace (the worst case: every note is visible to the reader),
written in chunks, each 8-40 words drawn from a 5,000-word vocabulary with Zipf-like frequencies.
Three queries, each timed `--repeats` times through `Notes.search` (what `memory_search` calls;
its top 10, ranked by the database): the most common word (most notes match: the ranking's worst
case), a rare word, and a three-word question. Medians, against the same queries over 1,000 notes
in the same run (the baseline: the ratio is how search grows with the store).

Request size: a lead calls `task` on two types with the same instructions, one with the read-only
tools alone and one that also has `memory_read`, `memory_search`, `todo_write`, `todo_read` (the
built-in `explore` type's set); the subagent's first request is the JSON body the `openai:`
adapter sends to a loopback Chat Completions server. The difference is what memory and todos add.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.loopback_openai

import sqlalchemy as sa
from tests.loopback_openai import OpenAIServer, Reply

from delegate import Runtime, Store, Subagent
from delegate.memory import Notes, Reader
from delegate.memory._schema import NOTES
from delegate.models import OpenAIModel, RetryPolicy

READER = Reader("alice", "/bench/ws")
VOCABULARY = 5_000
CHUNK = 5_000
MEMORY_AND_TODOS = ("memory_read", "memory_search", "todo_write", "todo_read")
READ_ONLY = ("read_file", "grep", "find_files", "list_dir")


def vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def fill(store: Store, count: int, words: list[str], rng: random.Random) -> None:
    weights = [1 / (rank + 1) for rank in range(len(words))]
    now = "2026-12-07T00:00:00+00:00"
    written = 0
    while written < count:
        rows = [
            {
                "user_id": READER.user_id,
                "workspace": READER.workspace,
                "scope": "local",
                "agent": "",
                "text": " ".join(rng.choices(words, weights, k=rng.randint(8, 40))) + ".",
                "run_id": None,
                "written_by": None,
                "created_at": now,
                "updated_at": now,
            }
            for _ in range(min(CHUNK, count - written))
        ]
        with store.write() as conn:
            conn.execute(NOTES.insert(), rows)
        written += len(rows)


def timed(search: Callable[[], object], repeats: int) -> float:
    search()  # warm: the first query reads the index from disk
    samples: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        search()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def queries(words: list[str]) -> dict[str, str]:
    return {
        "common word": words[0],
        "rare word": words[-1],
        "three words": f"how does {words[40]} use {words[400]} and {words[2000]}",
    }


@contextmanager
def database(backend: str, folder: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{folder / f'memory-{uuid.uuid4().hex[:6]}.db'}"
        return
    url = os.environ["DELEGATE_TEST_PG"]
    admin = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        yield (
            sa.make_url(url)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


def search_figures(backend: str, count: int, repeats: int, folder: Path) -> dict[str, float]:
    rng = random.Random(38)
    words = vocabulary(rng)
    figures: dict[str, float] = {}
    with database(backend, folder) as url, Store.open(url) as store:
        notes = Notes(store)
        start = time.perf_counter()
        fill(store, count, words, rng)
        figures["write s"] = time.perf_counter() - start
        if store.engine.dialect.name == "postgresql":
            with store.write() as conn:
                conn.exec_driver_sql("ANALYZE memory_notes")
        for name, query in queries(words).items():
            found = len(notes.search(READER, query))
            assert found > 0, f"{name!r} found nothing"
            figures[name] = timed(lambda q=query: notes.search(READER, q), repeats)
    return figures


def search_report(backend: str, count: int, repeats: int, folder: Path) -> None:
    baseline = search_figures(backend, 1_000, repeats, folder)
    big = search_figures(backend, count, repeats, folder)
    print(f"\n{backend}: memory_search (Notes.search, top 10), median of {repeats}")
    print(f"  writing {count:,} notes: {big['write s']:.1f} s; 1,000: {baseline['write s']:.2f} s")
    print(f"  {'query':<12} {f'{count:,} notes':>14} {'1,000 notes':>12} {'ratio':>7}")
    for name in queries([""] * VOCABULARY):
        print(f"  {name:<12} {big[name]:>11.2f} ms {baseline[name]:>9.2f} ms {big[name] / baseline[name]:>6.1f}x")


def subagent_requests() -> dict[str, dict[str, Any]]:
    instructions = "Answer one question about the code, citing files."
    bare = Subagent(name="bare", description="Reads code.", instructions=instructions, tools=list(READ_ONLY))
    full = Subagent(
        name="full", description="Reads code.", instructions=instructions, tools=[*READ_ONLY, *MEMORY_AND_TODOS]
    )
    calls = iter(["bare", "full"])

    def answer(body: dict[str, Any]) -> Reply:
        if "task" not in {t["function"]["name"] for t in body.get("tools", [])}:
            return Reply(tool_calls=[("complete", {"summary": "done"})])
        kind = next(calls, None)
        if kind is None:
            return Reply(content="done")
        return Reply(tool_calls=[("task", {"subagent_type": kind, "description": kind, "prompt": "Where is auth?"})])

    with tempfile.TemporaryDirectory() as folder, OpenAIServer(answer) as server:
        model = OpenAIModel("bench", base_url=server.base_url, api_key="k", retry=RetryPolicy(attempts=1))
        Runtime(model=model, workspace=folder, subagents=[bare, full]).run_sync("Map the auth flow.")
    firsts: dict[str, dict[str, Any]] = {}
    for body in server.requests:
        names = {t["function"]["name"] for t in body.get("tools", [])}
        if "task" in names:
            continue
        firsts.setdefault("full" if "memory_search" in names else "bare", body)
    return firsts


def request_report() -> None:
    firsts = subagent_requests()
    bare, full = (len(json.dumps(firsts[k]).encode()) for k in ("bare", "full"))
    tools = {t["function"]["name"]: len(json.dumps(t).encode()) for t in firsts["full"]["tools"]}
    system = len(firsts["full"]["messages"][0]["content"].encode()) - len(
        firsts["bare"]["messages"][0]["content"].encode()
    )
    print("\nA subagent's first request (JSON body of the openai: adapter)")
    print(f"  read-only tools alone: {bare:,} B; with memory and todo tools: {full:,} B")
    print(f"  added: {full - bare:,} B ({(full - bare) / bare:.1%}); of it, system prompt: {system:,} B")
    print("  " + ", ".join(f"{name} {tools[name]:,} B" for name in MEMORY_AND_TODOS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    request_report()
    backends = ["sqlite", "postgresql"] if os.environ.get("DELEGATE_TEST_PG") else ["sqlite"]
    with tempfile.TemporaryDirectory() as folder:
        for backend in backends:
            search_report(backend, args.notes, args.repeats, Path(folder))


if __name__ == "__main__":
    main()
