"""What one subagent's result costs the lead: tokens of the text the lead reads.

    python bench/bench_results.py

Tokens are counted by a real tokenizer: the local model's (SmolLM2's 49k BPE, through llama.cpp's
`/tokenize`; the weights must be cached, as `delegate run --model local` does). Reports the tokens
of a typical result (a 400-character summary and three artifacts) against the 200-token target,
next to a baseline measured in the same run (the same record in the format the lead read before
results were bounded), the characters and tokens the lead reads for a 200,000-character summary
(before: all of it), and the median time to render each.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime

from delegate._record import Artifact, TaskOutput
from delegate._usage import Usage
from delegate.models._local import ensure_weights, local_server_url
from delegate.subagents._output import render

TARGET_TOKENS = 200
SUMMARY = (
    "Auth goes through AuthMiddleware (src/auth/middleware.py:40), which reads the bearer token, "
    "checks it against the sessions table via SessionStore.lookup, and sets request.user. Refresh "
    "tokens are rotated in src/auth/refresh.py; expiry is 15 minutes, configured in settings.py. "
    "Two gaps: logout does not revoke refresh tokens; the admin API skips the middleware. "
    "Sequence diagram in docs/auth/flow.md."
)


def record(summary: str) -> TaskOutput:
    now = datetime.now(UTC)
    paths = [("docs/auth/flow.md", 4_812), ("docs/auth/tokens.md", 2_210), ("notes/auth-open-questions.md", 731)]
    return TaskOutput(
        id="sub1",
        type="researcher",
        description="Map the auth flow",
        tool_call_id="call_1",
        parent_agent_id="lead",
        status="completed",
        stop_reason="stop_tool",
        summary=summary,
        artifacts=[
            Artifact(path=f"/ws/{p}", relative_path=p, size=size, fs_type="file", modified_at=now.isoformat())
            for p, size in paths
        ],
        steps=7,
        usage=Usage(input_tokens=11_203, output_tokens=1_142, requests=7),
        started_at=now,
        completed_at=now,
    )


def baseline(r: TaskOutput) -> str:
    """The text the lead read before results were bounded (every character of the summary)."""
    lines = [f"[{r.status}] {r.type}: {r.description} ({r.steps} steps, {r.usage.total_tokens} tokens)"]
    lines.append(f"Summary: {r.summary.strip() or '(none)'}")
    lines.append("Artifacts:")
    lines += [f"- {a.relative_path or a.path} ({a.size} bytes, {a.fs_type})" for a in r.artifacts]
    return "\n".join(lines)


def tokenizer() -> Callable[[str], int]:
    base = local_server_url(ensure_weights()).removesuffix("/v1")

    def count(text: str) -> int:
        body = json.dumps({"content": text, "add_special": False}).encode()
        request = urllib.request.Request(f"{base}/tokenize", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            return len(json.load(answer)["tokens"])

    return count


def median_us(fn: Callable[[], object], repeats: int = 2_000) -> float:
    times: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    count = tokenizer()
    assert len(SUMMARY) == 400, len(SUMMARY)
    typical = record(SUMMARY)
    now_text, before_text = render(typical), baseline(typical)
    now_tokens, before_tokens = count(now_text), count(before_text)
    verdict = "meets" if now_tokens <= TARGET_TOKENS else "MISSES"
    print(f"typical result (400-char summary, 3 artifacts): {len(now_text)} chars, {now_tokens} tokens")
    print(f"  target {TARGET_TOKENS} tokens: {verdict} it; baseline format {before_tokens} tokens")
    print(f"  ratio to baseline: {now_tokens / before_tokens:.2f}x")

    huge = record("".join(f"finding {i:06d}. " for i in range(12_500)))
    huge.result_file = "subagent-results/run_x/sub1.md"
    huge.artifacts.insert(
        0, Artifact(path="/ws/" + huge.result_file, relative_path=huge.result_file, size=200_400, fs_type="file")
    )
    huge_text, huge_before = render(huge), baseline(huge)
    print(
        f"200,000-char summary: the lead reads {len(huge_text):,} chars, {count(huge_text)} tokens "
        f"(baseline: {len(huge_before):,} chars, {count(huge_before):,} tokens)"
    )
    print(
        f"render time, median: typical {median_us(lambda: render(typical)):.1f} us "
        f"(baseline {median_us(lambda: baseline(typical)):.1f} us); "
        f"200,000-char summary {median_us(lambda: render(huge), 200):.1f} us"
    )


if __name__ == "__main__":
    main()
