"""A run's model calls, their cost and the model/tool split of each agent's bar, in a real headless
Chromium, against a real server whose agents reach a loopback OpenAI-compatible server (the
release team of `test_web_run`) as OpenAI's `gpt-4.1-mini`, priced by `genai-prices`: each call
with its step, model, tokens, cost and time; its request and answer as kept, opened in place; the
run's and each agent's cost as genai-prices prices them; each bar in two colours whose totals are
the spans of the run's own events."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate import RuntimeSettings, Store
from delegate._events import Event
from delegate.server import ServerSettings, create_app
from tests.loopback_openai import OpenAIServer
from tests.loopback_server import LiveServer
from tests.test_cost import MODEL, priced_model, table_price
from tests.test_server_web import CHROMIUM
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)
from tests.test_web_run import NOTES, ReleaseTeam, shoot, start_held, start_run
from tests.test_web_run import model_server as model_server  # the release team, on loopback
from tests.test_web_run import page as page  # signed in as alice, on `server` below
from tests.test_web_run import store as store
from tests.test_web_run import team as team

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
expect = sync_api.expect


@pytest.fixture
def server(tmp_path: Path, store: Store, model_server: OpenAIServer) -> Iterator[LiveServer]:
    """The server, its every agent on OpenAI's prices (through the loopback server, as through a proxy)."""
    settings = ServerSettings(runtime=RuntimeSettings(workspace=tmp_path), model=lambda _: priced_model(model_server))
    with LiveServer(create_app(settings, store=store)) as running:
        yield running


def money(usd: float) -> str:
    """A cost as the page writes it: four decimals, or two significant digits below a cent."""
    return f"${usd:.{min(10, max(4, 1 - math.floor(math.log10(usd))))}f}"


def the_run(store: Store) -> tuple[str, list[Event]]:
    run = store.list_runs()[0]
    return run.id, store.events(run.id)


def calls_of(events: list[Event], agent: str) -> list[tuple[Event, Event]]:
    """Each model request of `agent` with its answer."""
    requests = [e for e in events if e.agent_id == agent and e.type == "model.request"]
    answers = [e for e in events if e.agent_id == agent and e.type == "model.response"]
    assert len(requests) == len(answers)
    return list(zip(requests, answers, strict=True))


def busy(spans: list[tuple[float, float]]) -> float:
    """The time `spans` cover, each moment once."""
    total, up_to = 0.0, -math.inf
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, up_to))
        up_to = max(up_to, end)
    return total


def tool_spans(events: list[Event], agent: str) -> list[tuple[float, float]]:
    ended = {e.tool_call_id: e.ts for e in events if e.agent_id == agent and e.type == "tool.completed"}
    return [(e.ts, ended[e.tool_call_id]) for e in events if e.agent_id == agent and e.type == "tool.started"]


def price(calls: list[tuple[Event, Event]]) -> float:
    return sum(table_price(answer.data["usage"]) for _, answer in calls)


def test_each_agent_lists_its_model_calls_with_tokens_cost_and_time_and_opens_what_each_was_sent_and_answered(
    page: sync_api.Page, store: Store, tmp_path: Path
) -> None:
    start_run(page, "How are releases made?")
    _, events = the_run(store)
    page.click("#timeline [data-agent=sub1]")
    detail = page.locator("#agent-detail")
    turns = detail.locator("li.turn")
    expect(turns).to_have_count(2)
    sub1 = calls_of(events, "sub1")
    for n, (request, answer) in enumerate(sub1):
        head = turns.nth(n).locator(".turn-head")
        expect(head.locator(".turn-label")).to_have_text(f"step {n + 1}")
        expect(head.locator(".turn-model")).to_have_text(f"openai:{MODEL}")
        usage = answer.data["usage"]
        expect(head.locator(".turn-tokens")).to_have_text(f"{usage['input_tokens'] + usage['output_tokens']} tokens")
        expect(head.locator(".turn-cost")).to_have_text(money(table_price(usage)))
        took = head.locator(".call-dur").inner_text()
        assert took.endswith(("ms", " s")) and request.ts <= answer.ts, took
    expect(detail.locator(".detail-head .meta")).to_contain_text(f"cost {money(price(sub1))}")

    # The first call: sent the system prompt and the task; answered with a write_file call.
    turns.nth(0).get_by_role("button", name="Request and answer").click()
    first = turns.nth(0).locator(".turn-body")
    sent = first.locator(".sent-request")
    expect(sent).to_contain_text("the system prompt and 1 message")
    sent.locator(".sent-system summary").click()
    expect(sent.locator(".sent-system .msg-text")).to_contain_text("complete")  # its instructions name its end
    expect(sent.locator(".msg.user .msg-text")).to_have_text("notes")
    call = first.locator(".sent-answer .msg-call")
    expect(call.locator(".call-name")).to_have_text("write_file")
    expect(call.locator(".msg-args")).to_contain_text('"path": "notes.md"')
    expect(first.locator(".not-kept")).to_have_count(0)

    # The second: the messages since the first's answer shown (that answer, the file's result), the
    # task folded among the earlier ones; answered with `complete`.
    turns.nth(1).get_by_role("button", name="Request and answer").click()
    second = turns.nth(1).locator(".turn-body")
    expect(second.locator(".sent-request > p.muted")).to_have_text("the system prompt and 3 messages")
    expect(second.locator(".sent-earlier summary")).to_have_text("1 earlier message")
    expect(second.locator(".sent-request > .msg.tool .msg-text")).to_have_text(
        f"created notes.md ({len(NOTES)} bytes written)"
    )
    expect(second.locator(".sent-answer .call-name")).to_have_text("complete")
    expect(second.locator(".sent-answer .msg-args")).to_contain_text("Wrote **notes.md**")

    # The lead's last answer is its final answer, rendered as Markdown.
    page.click("#timeline [data-agent=lead]")
    lead_turns = detail.locator("li.turn")
    expect(lead_turns).to_have_count(3)
    lead_turns.nth(2).get_by_role("button", name="Request and answer").click()
    final = lead_turns.nth(2).locator(".sent-answer")
    expect(final.locator(".md h2")).to_have_text("How releases are made")
    expect(lead_turns.nth(2).locator(".sent-request > .msg.tool .msg-label")).to_have_text("result of task")
    shoot(page, tmp_path, "web-model-calls.png")


def test_the_run_and_each_agent_show_their_cost_as_genai_prices_prices_each_call(
    page: sync_api.Page, store: Store
) -> None:
    start_run(page, "How are releases made?")
    run_id, events = the_run(store)
    agents = ["lead", "sub1", "sub2", "sub3"]
    each = {agent: price(calls_of(events, agent)) for agent in agents}
    expect(page.locator("#stat-cost")).to_have_text(money(sum(each.values())))
    assert store.get_run(run_id).usage.cost_usd == pytest.approx(sum(each.values()))  # type: ignore[union-attr]
    for agent in agents:
        node = page.locator(f"[data-agent={agent}] > .node .meta").first
        expect(node).to_contain_text(money(each[agent]))
    page.reload()  # read back: the same figures
    expect(page.locator("#stat-cost")).to_have_text(money(sum(each.values())))


def test_each_agents_bar_is_split_into_model_time_and_tool_time_with_both_totals(
    page: sync_api.Page, store: Store
) -> None:
    start_run(page, "How are releases made?")
    _, events = the_run(store)
    expect(page.locator("#timeline-legend")).to_contain_text("waiting for the model")
    for agent in ("lead", "sub1", "sub2", "sub3"):
        bar = page.locator(f"#timeline [data-agent={agent}] .tl-bar")
        model = busy([(q.ts, a.ts) for q, a in calls_of(events, agent)])
        tools = busy(tool_spans(events, agent))
        assert model > 0 and tools > 0, agent  # every agent both asked its model and ran a tool
        assert float(bar.get_attribute("data-model-s") or "nan") == pytest.approx(model, abs=0.0011)
        assert float(bar.get_attribute("data-tool-s") or "nan") == pytest.approx(tools, abs=0.0011)
        title = bar.get_attribute("title") or ""
        assert f"{agent}: completed, " in title and " · model " in title and " · tools " in title, title
        # One look at the bar and its segments, found and measured in one go (the timeline is drawn
        # again once the stored record is read back after the run ends): each one's place and colour.
        frame, segments = page.evaluate(
            """selector => {
                const b = document.querySelector(selector);
                return [b.getBoundingClientRect().toJSON(), [...b.querySelectorAll('.tl-seg')].map(s => {
                    const r = s.getBoundingClientRect();
                    return {x: r.x, width: r.width, kind: s.classList[1], colour: getComputedStyle(s).backgroundColor};
                })];
            }""",
            f"#timeline [data-agent={agent}] .tl-bar",
        )
        assert {s["kind"] for s in segments} == {"model", "tool"}, segments
        for s in segments:
            assert frame["x"] - 0.5 <= s["x"] and s["x"] + s["width"] <= frame["x"] + frame["width"] + 0.5, (s, frame)
        colours = {s["colour"] for s in segments}
        assert len(colours) == 2, colours  # model and tools, in two colours


def test_a_call_of_an_agent_still_running_says_its_request_is_not_kept_yet_then_shows_it(
    page: sync_api.Page, team: ReleaseTeam
) -> None:
    start_held(page, team)
    page.click("#timeline [data-agent=sub2]")
    detail = page.locator("#agent-detail")
    turn = detail.locator("li.turn").first
    expect(turn.locator(".call-dur")).not_to_have_text("waiting")
    turn.get_by_role("button", name="Request and answer").click()
    body = turn.locator(".turn-body")
    expect(body.locator(".not-kept").first).to_have_text(
        "not kept yet: a subagent's conversation is kept when it completes"
    )
    expect(body.locator(".sent-request .not-kept")).to_have_text("not kept")
    expect(body.locator(".sent-answer .not-kept")).to_have_text("not kept")
    page.click("#timeline [data-agent=sub1]")  # done meanwhile: what it was sent is kept
    done = detail.locator("li.turn").first
    done.get_by_role("button", name="Request and answer").click()
    expect(done.locator(".sent-request .msg.user .msg-text")).to_have_text("notes")
    team.scan_may_finish.set()
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    page.click("#timeline [data-agent=sub2]")
    again = detail.locator("li.turn").first
    again.get_by_role("button", name="Request and answer").click()  # closes what was open
    expect(again.locator(".turn-body")).to_be_hidden()
    again.get_by_role("button", name="Request and answer").click()  # read again: the subagent completed
    expect(again.locator(".sent-request .msg.user .msg-text")).to_have_text("scan")
    expect(again.locator(".sent-answer .call-name")).to_have_text("list_dir")
    expect(again.locator(".not-kept")).to_have_count(0)
