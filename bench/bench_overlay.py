"""Benchmarks of overlay subagents (issue 25's targets), medians and ratios in one process:

    python bench/bench_overlay.py            # about 30 seconds
    python bench/bench_overlay.py --quick    # fewer repeats, for a smoke test

- write 100: a subagent that writes 100 files with `write_file` and completes, run by
  `Runtime.run_task` with a function model: on a layer (`isolation="overlay"`, merged when it
  completes) against the same subagent writing the shared workspace (target: at most 1.5x);
- merge 1,000: `merge_layer` of a layer that changes 1,000 files (target: at most 1 s);
- read: `read_file` of a 4 KiB workspace file through a layer (which has files of its own)
  against a direct read (target: at most 1.2x).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from delegate import RunLimits, Runtime, Subagent, Workspace  # noqa: E402
from delegate.models import ModelRequest, ModelResponse  # noqa: E402
from delegate.testing import FunctionModel, call, respond  # noqa: E402
from delegate.tools._files import _read_file, _write_file  # noqa: E402  # pyright: ignore[reportPrivateUsage]
from delegate.workspace._layer import Layer  # noqa: E402
from delegate.workspace._merge import merge_layer  # noqa: E402

_runs = itertools.count()


def _writer(files: int) -> FunctionModel:
    """A model whose subagent writes `files` files in one turn, then completes."""

    def answer(request: ModelRequest) -> ModelResponse:
        if not any(m.role == "tool" for m in request.messages):
            folder = f"run{next(_runs)}"
            writes = [
                ("write_file", {"path": f"{folder}/f{i}.txt", "content": f"file {i}\n" * 20}) for i in range(files)
            ]
            return respond(writes)
        return call("complete", summary="wrote them")

    return FunctionModel(answer)


async def _write_100(root: Path, repeat: int) -> tuple[float, float]:
    shared = Subagent(name="shared-writer", description="writes", tools=["write_file"], max_steps=5)
    overlay = Subagent(
        name="overlay-writer", description="writes", tools=["write_file"], max_steps=5, isolation="overlay"
    )
    rt = Runtime(model=_writer(100), workspace=root, subagents=[shared, overlay], store=False, limits=RunLimits())
    times: dict[str, list[float]] = {"shared-writer": [], "overlay-writer": []}
    try:
        for _ in range(repeat):
            for name in times:
                began = time.perf_counter()
                out = await rt.run_task(subagent_type=name, prompt="write the files")
                times[name].append(time.perf_counter() - began)
                assert out.status == "completed", out.error
                assert name == "shared-writer" or len(out.changes) == 100, out.changes[:3]
    finally:
        await rt.aclose()
    return statistics.median(times["shared-writer"]), statistics.median(times["overlay-writer"])


def _merge_1000(root: Path, repeat: int) -> float:
    workspace = Workspace.open(root)
    times: list[float] = []
    for n in range(repeat):
        folder = root / f"m{n}"
        folder.mkdir()
        for i in range(1000):
            (folder / f"f{i}.txt").write_text(f"old {i}\n")
        layer = Layer(root=workspace.root, run_id="bench", agent_id=f"merge{n}")
        layered = replace(workspace, layer=layer)
        for i in range(1000):
            _write_file(layered, f"m{n}/f{i}.txt", f"new {i}\n")
        began = time.perf_counter()
        outcome = merge_layer(layered, layer)
        times.append(time.perf_counter() - began)
        assert outcome.merged and len(outcome.changes) == 1000
    return statistics.median(times)


def _read(root: Path, reads: int) -> tuple[float, float]:
    workspace = Workspace.open(root)
    (root / "read").mkdir()
    (root / "read" / "page.txt").write_text(("a line of text to read\n" * 180)[:4096])
    layer = Layer(root=workspace.root, run_id="bench", agent_id="reader", opaque=False)  # as the runner makes it
    layered = replace(workspace, layer=layer)
    for i in range(20):
        _write_file(layered, f"read/own{i}.txt", "mine\n")
    direct: list[float] = []
    through: list[float] = []
    for _ in range(reads // 100):
        for view, into in ((workspace, direct), (layered, through)):
            began = time.perf_counter()
            for _ in range(100):
                _read_file(view, "read/page.txt", 1, 2000)
            into.append((time.perf_counter() - began) / 100)
    return statistics.median(direct), statistics.median(through)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeat = 3 if args.quick else 9
    with tempfile.TemporaryDirectory(prefix="bench-overlay-") as tmp:
        base = Path(tmp)
        for name in ("write", "merge", "read"):
            (base / name).mkdir()
        shared, overlay = asyncio.run(_write_100(base / "write", repeat))
        merge = _merge_1000(base / "merge", 3 if args.quick else 5)
        direct, through = _read(base / "read", 2_000 if args.quick else 20_000)
    rows = [
        ("write 100 files, shared workspace", f"{shared * 1000:8.1f} ms", ""),
        ("write 100 files, overlay + merge", f"{overlay * 1000:8.1f} ms", f"{overlay / shared:.2f}x (target <= 1.5x)"),
        ("merge 1,000 changed files", f"{merge * 1000:8.1f} ms", "(target <= 1000 ms)"),
        ("read_file 4 KiB, direct", f"{direct * 1e6:8.1f} us", ""),
        ("read_file 4 KiB, through a layer", f"{through * 1e6:8.1f} us", f"{through / direct:.2f}x (target <= 1.2x)"),
    ]
    for what, median, ratio in rows:
        print(f"{what:<36} median {median}   {ratio}".rstrip())


if __name__ == "__main__":
    main()
