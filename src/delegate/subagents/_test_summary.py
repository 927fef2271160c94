"""What a test run's output says: the summary lines test runners print, read by `tests_passed`.

`tests_passed:<command>` holds only when the command exits 0 *and* its output carries a test
runner's own summary saying at least one test ran and none failed. Each runner is recognised by
the summary it prints itself, in its exact shape, not by a loose phrase: pytest's
`12 passed in 0.51s` (with or without its `=` rule), unittest's `Ran 12 tests in 0.003s` and the
`OK` / `FAILED (failures=1)` line after it, go test's `ok  <package>  0.01s` / `FAIL <package>` /
`--- FAIL:` lines, cargo's `test result: ok. 12 passed; 0 failed; ...`, jest's
`Tests:  1 failed, 4 passed, 5 total`, vitest's `Tests  4 passed (4)`, node's test runner's
`# tests 5` / `# pass 5` / `# fail 0` (TAP) or `ℹ tests 5` ... (spec), and mocha's `5 passing (12ms)`
/ `1 failing`. So `echo '12 passed'` is no test run: nothing a runner prints looks like it. (A
command that prints a whole summary line of its own can still pose as one; the criterion's
command is the delegating agent's own words, and the verdict quotes the line it read.)

Colour codes are taken out first; a summary counts wherever it is in the output, and every
summary found counts (cargo prints one per test binary, go one line per package).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["TestSummary", "read_summaries"]


@dataclass(frozen=True, slots=True)
class TestSummary:
    """One runner's summary: how many tests ran, how many failed (errors included), the line."""

    runner: str
    ran: int
    failed: int
    line: str


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_PYTEST = re.compile(
    r"=*\s*(?P<counts>(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)"
    r"(?:, )?)+|no tests ran) in \d+(?:\.\d+)?s(?: \([\d:.]+\))?\s*=*"
)
_COUNT = re.compile(r"(\d+) (\w+)")
_UNITTEST_RAN = re.compile(r"Ran (\d+) tests? in \d+(?:\.\d+)?s")
_UNITTEST_END = re.compile(r"(?P<ok>OK)(?: \(.*\))?|FAILED \((?P<why>[^)]*)\)|NO TESTS RAN(?: \(.*\))?")
_UNITTEST_FAILED = re.compile(r"(?:failures|errors|unexpected successes)=(\d+)")
_GO_OK = re.compile(r"ok\s+\S+\s+(?:\(cached\)|\d+(?:\.\d+)?s)(?P<rest>.*)")
_GO_FAIL = re.compile(r"FAIL\s+\S+\s+(?:\d+(?:\.\d+)?s|\[build failed\]|\[setup failed\])")
_GO_TEST = re.compile(r"--- (?P<what>PASS|FAIL): \S+")
_GO_NONE = re.compile(r"\?\s+\S+\s+\[no test files\]")
_CARGO = re.compile(r"test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; \d+ ignored; \d+ measured;.*")
_JEST = re.compile(r"Tests:\s+(?P<counts>.*?)(?P<total>\d+) total")
_VITEST = re.compile(r"Tests\s+(?P<counts>(?:\d+ \w+(?: \| )?)+)\s*\((?P<total>\d+)\)(?:\s.*)?")
_NODE = re.compile(r"[#ℹ] (?P<what>tests|pass|fail) (?P<n>\d+)")
_MOCHA_PASS = re.compile(r"(\d+) passing \(\d+(?:\.\d+)?m?s\)")
_MOCHA_FAIL = re.compile(r"(\d+) failing")


def read_summaries(output: str) -> list[TestSummary]:
    """Every test runner's summary in `output`, in the order they appear."""
    lines = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    found: list[tuple[int, TestSummary]] = []
    for reader in (_pytest, _unittest, _go, _cargo, _jest, _vitest, _node, _mocha):
        found += reader(lines)
    return [summary for _, summary in sorted(found, key=lambda pair: pair[0])]


def _counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for number, word in _COUNT.findall(text):
        key = word.rstrip("s") if word in ("errors", "warnings") else word
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def _pytest(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    for at, line in enumerate(lines):
        match = _PYTEST.fullmatch(line)
        if match is None:
            continue
        counts = _counts(match.group("counts"))
        failed = counts.get("failed", 0) + counts.get("error", 0)
        ran = counts.get("passed", 0) + failed + counts.get("xfailed", 0) + counts.get("xpassed", 0)
        yield at, TestSummary("pytest", ran, failed, line)


def _unittest(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    for at, line in enumerate(lines):
        ran = _UNITTEST_RAN.fullmatch(line)
        if ran is None:
            continue
        end = next((m for rest in lines[at + 1 : at + 4] if (m := _UNITTEST_END.fullmatch(rest))), None)
        if end is None:
            continue  # a summary cut short: not read as one
        why = end.group("why")
        failed = 0 if why is None else max(1, sum(int(n) for n in _UNITTEST_FAILED.findall(why)))
        yield at, TestSummary("unittest", int(ran.group(1)), failed, f"{line}; {end.group(0)}")


def _go(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    for at, line in enumerate(lines):
        if (ok := _GO_OK.fullmatch(line)) is not None:
            ran = 0 if "[no tests to run]" in ok.group("rest") else 1
            yield at, TestSummary("go test", ran, 0, line)
        elif _GO_FAIL.fullmatch(line) is not None or (
            (test := _GO_TEST.match(line)) is not None and test.group("what") == "FAIL"
        ):
            yield at, TestSummary("go test", 1, 1, line)
        elif _GO_NONE.fullmatch(line) is not None:
            yield at, TestSummary("go test", 0, 0, line)


def _cargo(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    for at, line in enumerate(lines):
        match = _CARGO.fullmatch(line)
        if match is not None:
            passed, failed = int(match.group(1)), int(match.group(2))
            yield at, TestSummary("cargo test", passed + failed, failed, line)


def _jest(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    for at, line in enumerate(lines):
        match = _JEST.fullmatch(line)
        if match is not None:
            counts = _counts(match.group("counts"))
            failed = counts.get("failed", 0)
            yield at, TestSummary("jest", counts.get("passed", 0) + failed, failed, line)


def _vitest(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    for at, line in enumerate(lines):
        match = _VITEST.fullmatch(line)
        if match is not None:
            counts = _counts(match.group("counts"))
            failed = counts.get("failed", 0)
            yield at, TestSummary("vitest", counts.get("passed", 0) + failed, failed, line)


def _node(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    """node --test: `tests N`, `pass N` and `fail N` lines, read together once all three are seen."""
    seen: dict[str, int] = {}
    first = 0
    for at, line in enumerate(lines):
        match = _NODE.fullmatch(line)
        if match is None:
            continue
        if not seen:
            first = at
        seen[match.group("what")] = int(match.group("n"))
        if len(seen) == 3:
            shown = f"tests {seen['tests']}, pass {seen['pass']}, fail {seen['fail']}"
            yield first, TestSummary("node --test", seen["tests"], seen["fail"], shown)
            seen = {}


def _mocha(lines: list[str]) -> Iterator[tuple[int, TestSummary]]:
    for at, line in enumerate(lines):
        match = _MOCHA_PASS.fullmatch(line)
        if match is None:
            continue
        passed = int(match.group(1))
        failing = next((m for rest in lines[at + 1 : at + 4] if (m := _MOCHA_FAIL.fullmatch(rest))), None)
        failed = int(failing.group(1)) if failing is not None else 0
        yield at, TestSummary("mocha", passed + failed, failed, line + (f"; {failing.group(0)}" if failing else ""))
