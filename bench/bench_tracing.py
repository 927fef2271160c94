"""What tracing costs a fan-out: `bench_subagents.py`'s N=1000 run, A/B in one process.

    python bench/bench_tracing.py              # N = 1000, 5 repeats of each, interleaved
    python bench/bench_tracing.py --n 200 --repeats 3

A: no OTEL_* variable (how every run starts when tracing is off). B: the same run with its
tracing sink removed altogether (the code before tracing existed): A/B is what "off" costs.
C: tracing on, exporting to an OTLP/HTTP receiver on loopback (spans are sent by the SDK's
background thread; the flush is outside the timing). D: C with message content capture on
(`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`). Reports medians of ms per subagent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_subagents import one_run

from delegate.run import _tracing


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _rotated(modes: list[str], i: int) -> list[str]:
    k = i % len(modes)
    return modes[k:] + modes[:k]


def _timed(root: Path, n: int, mode: str, endpoint: str, real_sinks: object) -> float:
    if mode == "none":
        _tracing.sinks = list  # type: ignore[assignment]  # no tracing code at all
    if mode in ("on", "content"):
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    if mode == "content":
        os.environ[_tracing.CAPTURE_CONTENT] = "true"
    try:
        return asyncio.run(one_run(root, n, 0.0, False))
    finally:
        _tracing.sinks = real_sinks  # type: ignore[assignment]
        _tracing.flush_traces()
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        os.environ.pop(_tracing.CAPTURE_CONTENT, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        del os.environ[name]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    real_sinks = _tracing.sinks
    times: dict[str, list[float]] = {"off": [], "none": [], "on": [], "content": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        asyncio.run(one_run(root, 200, 0.0, False))  # warm up imports and caches
        for i in range(args.repeats):
            for mode in _rotated(["off", "none", "on", "content"], i):  # each mode in each position in turn
                times[mode].append(_timed(root, args.n, mode, endpoint, real_sinks))
    server.shutdown()
    per = {k: statistics.median(v) / args.n * 1000 for k, v in times.items()}
    print(f"fan-out N={args.n}, median of {args.repeats}, ms per subagent:")
    print(f"  tracing off (no OTEL_* variable): {per['off']:.3f}")
    print(f"  no tracing code at all:           {per['none']:.3f}   off / none = {per['off'] / per['none']:.3f}x")
    print(f"  tracing on (OTLP/HTTP, loopback): {per['on']:.3f}   on / off = {per['on'] / per['off']:.2f}x")
    content = per["content"]
    print(f"  on, message content captured:     {content:.3f}   content / on = {content / per['on']:.2f}x")


if __name__ == "__main__":
    main()
