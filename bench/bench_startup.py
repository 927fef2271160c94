"""What a `delegate` command costs to start: each command a fresh process, as the CLI's user (and
the test suite, which starts hundreds) runs it, this code against a baseline in the same run.

    python bench/bench_startup.py                       # this checkout only
    python bench/bench_startup.py --baseline 00c540a    # and the code at 00c540a, interleaved (ABBA)
    python bench/bench_startup.py --repeats 9 --baseline main

The commands: `delegate --help`, `runs list`, `runs show RUN`, and `delegate run "say hi"` against
an OpenAI-compatible server on loopback (`tests/loopback_openai.py`, answering at once; the run
has a SQLite store, as a user's has). Each is timed in the child's CPU seconds (what the load of
other processes inflates least) and wall seconds, medians of `--repeats`; the modules it imports
are counted once (`python -X importtime`). The baseline is `src/` of `--baseline` (`git archive`),
put first on `PYTHONPATH` (the same venv, the same packages).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.loopback_openai import OpenAIServer, Reply  # noqa: E402

COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "runs list": ["runs", "list"],
    "runs show": ["runs", "show", "RUN"],
    "run (openai, loopback)": ["run", "say hi", "--model", "openai:loopback-model"],
}


def one(src: Path, argv: list[str], env: dict[str, str], cwd: Path, *, count: bool = False) -> tuple[float, float, int]:
    """One `python -m delegate ARGV` with `src` first on the path: (CPU s, wall s, modules)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    flags = ["-X", "importtime"] if count else []
    done = subprocess.run(
        [sys.executable, *flags, "-m", "delegate", *argv],
        cwd=cwd,
        env=env | {"PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"delegate {' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    modules = done.stderr.count("import time:") - 1 if count else 0  # less the header line
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, took, modules


def run_id(src: Path, env: dict[str, str], cwd: Path) -> str:
    listed = subprocess.run(
        [sys.executable, "-m", "delegate", "runs", "list", "--json"],
        cwd=cwd,
        env=env | {"PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    import json

    runs = json.loads(listed)
    return (runs if isinstance(runs, list) else runs["runs"])[0]["run_id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", help="a git revision to compare with (its src/, unpacked in a temporary folder)")
    args = parser.parse_args()

    codes: dict[str, Path] = {"this": REPO / "src"}
    with (
        tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp,
        OpenAIServer(lambda body: Reply(content="hi")) as server,
    ):
        root = Path(tmp)
        if args.baseline:
            base = root / "baseline"
            base.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(REPO), "archive", args.baseline, "src"], check=True, capture_output=True
            )
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
            codes = {"baseline": base / "src", **codes}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DELEGATE_"))}
        env |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "loopback", "NO_COLOR": "1"}
        work = {name: root / f"ws-{name}" for name in codes}
        ids: dict[str, str] = {}
        for name, src in codes.items():
            work[name].mkdir()
            one(src, COMMANDS["run (openai, loopback)"][:], env, work[name])  # a run to list and show
            ids[name] = run_id(src, env, work[name])
        print(f"{len(codes)} code(s), {args.repeats} repeats, load average {os.getloadavg()[0]:.1f}")
        header = f"{'command':<24}" + "".join(
            f"{name + ' cpu':>14}{name + ' wall':>14}{'modules':>9}" for name in codes
        )
        print(header + (f"{'cpu ratio':>11}" if len(codes) == 2 else ""))
        for label, argv in COMMANDS.items():
            taken: dict[str, list[tuple[float, float, int]]] = {name: [] for name in codes}
            order = list(codes)
            for repeat in range(args.repeats):
                for name in order if repeat % 2 == 0 else order[::-1]:  # ABBA: the load falls on both
                    shown = [ids[name] if part == "RUN" else part for part in argv]
                    taken[name].append(one(codes[name], shown, env, work[name]))
            counts = {
                name: one(codes[name], [ids[name] if p == "RUN" else p for p in argv], env, work[name], count=True)[2]
                for name in codes
            }
            line = f"{label:<24}"
            cpu: dict[str, float] = {}
            for name in codes:
                cpu[name] = statistics.median(t[0] for t in taken[name])
                wall = statistics.median(t[1] for t in taken[name])
                line += f"{cpu[name]:>13.2f}s{wall:>13.2f}s{counts[name]:>9}"
            if len(codes) == 2:
                line += f"{cpu['this'] / cpu['baseline']:>10.2f}x"
            print(line, flush=True)


if __name__ == "__main__":
    main()
