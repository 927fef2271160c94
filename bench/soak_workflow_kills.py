"""SIGKILL soak of a workflow (issue 36): a 200-agent workflow (100 in a `parallel()` map, 100
in a `pipeline()` reduce) run by the real CLI against the loopback OpenAI server, SIGKILLed at
`--kills` random moments (each after a random number of agents finished, more than the attempt
began with), each time resumed with `delegate run --resume`, then resumed to its end; on SQLite
and on PostgreSQL (`DELEGATE_TEST_PG`, or `--pg URL`; a schema of its own, dropped after).

It checks the end equals an uninterrupted run of the same script (run first, in a store of its
own): the result, the counts, each agent once, and usage counted once (input tokens and
requests); and prints, per store, the kills, the wall time, and the agents finished at each kill.

    .venv/bin/python bench/soak_workflow_kills.py [--kills 20] [--agents 100] [--stores sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa
from tests.cli_support import run_cli
from tests.loopback_openai import OpenAIServer
from tests.test_batch_cli import env_for
from tests.workflow_kills import MODEL, completing, expected, killed_workflow, outcome, soak

from delegate import Store


def pg_schema(url: str) -> tuple[str, sa.Engine, str]:
    admin = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
    schema = f"soak_{uuid.uuid4().hex[:12]}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    scoped = sa.make_url(url).update_query_dict({"options": f"-csearch_path={schema}"})
    return scoped.render_as_string(hide_password=False), admin, schema


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--agents", type=int, default=100, help="agents a phase (two phases)")
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds each model answer takes")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--pg", default=os.environ.get("DELEGATE_TEST_PG"))
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    n = args.agents
    failed = False
    with tempfile.TemporaryDirectory() as tmp, OpenAIServer(completing(args.latency)) as server:
        root = Path(tmp)
        script = root / "wf.py"
        script.write_text(killed_workflow(n))
        clean_ws = root / "clean"
        clean_ws.mkdir()
        began = time.monotonic()
        clean = run_cli(
            ["workflow", "run", str(script), "-m", MODEL, "--max-parallel", str(args.parallel),
             "--workspace", str(clean_ws), "--json"],
            env=env_for(server.base_url), timeout=600,
        )  # fmt: skip
        assert clean.returncode == 0, clean.stderr
        reference = outcome(json.loads(clean.stdout))
        print(f"uninterrupted run: {2 * n} agents in {time.monotonic() - began:.1f} s; matches expected: "
              f"{reference == expected(n)}")  # fmt: skip
        for kind in args.stores.split(","):
            ws = root / kind
            ws.mkdir()
            dropper = None
            if kind == "sqlite":
                url = f"sqlite:///{root / 'soak.db'}"
            elif args.pg:
                url, admin, schema = pg_schema(args.pg)
                dropper = (admin, schema)
            else:
                print("postgresql: skipped (set DELEGATE_TEST_PG or --pg)")
                continue
            began = time.monotonic()
            with Store.open(url) as store:
                done, out = soak(ws, script, env_for(server.base_url, url), store, kills=args.kills,
                                 total=2 * n, parallel=args.parallel, seed=args.seed)  # fmt: skip
            wall = time.monotonic() - began
            got = outcome(out)
            same = got == reference == expected(n)
            failed = failed or not same or done.kills < args.kills
            replayed = sum(a["replayed"] for a in out["workflow"]["agents"])
            print(
                f"{kind}: {done.kills} SIGKILLs, then --resume to the end in {wall:.1f} s; status {out['status']}; "
                f"equal to the uninterrupted run (result, counts, each agent once, {got['input_tokens']:,} input "
                f"tokens, {got['requests']} requests): {same}; agents finished at each kill: "
                f"{done.finished_at_kill} (median {statistics.median(done.finished_at_kill or [0])}); "
                f"answered from the journal in the last attempt: {replayed}"
            )
            if dropper is not None:
                with dropper[0].begin() as conn:
                    conn.exec_driver_sql(f"DROP SCHEMA {dropper[1]} CASCADE")
                dropper[0].dispose()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
