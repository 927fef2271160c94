"""The run and batch pages in a real headless Chromium, against a real server whose agents talk to
a loopback OpenAI-compatible model server (scripted turns): the drill-down into one agent's calls,
the timeline, the files a subagent delivered, and the final answer's Markdown.

Each test saves screenshots to its tmp_path; with `DELEGATE_TEST_SCREENSHOTS=DIR` they are also
saved in DIR: `bash scripts/screenshots.sh` makes `docs/web-run.png`, `docs/web-batch.png` and the
others so (a `DELEGATE_TEST_` variable is one the suite's `clean_env` keeps).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from delegate import RuntimeSettings, Store
from delegate.server import ServerSettings, create_app
from delegate.testing import is_lead
from tests.loopback_openai import Fault, OpenAIServer, Reply
from tests.loopback_server import LiveServer
from tests.test_server_web import CHROMIUM, sign_in
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
expect = sync_api.expect

NOTES = "# Release notes\n\n<b>not bold</b> & <script>window.__pwned = 'preview'</script>\n- fixed the build\n"
FINAL = """## How releases are made

Releases are cut by **`scripts/release.sh`** once the notes are written:

1. *Update* `CHANGELOG.md` from the notes in [notes.md](https://example.com/notes.md)
2. Tag the commit, then push:
   - the tag starts the build
   - CI publishes it

| step | who | time |
|---|---|---:|
| notes | sub1 | 5 min |
| review | sub3 | 2 min |

```sh
./scripts/release.sh 1.4.0
```
"""
HOSTILE = """# Report

<script>window.__pwned = "script"</script>
<img src="x" onerror="window.__pwned = 'img'">
[click me](javascript:window.__pwned='link')
[data](data:text/html,<script>alert(1)</script>) and [fine](https://example.com/ok)
<a href="javascript:alert(1)" onclick="window.__pwned='a'">raw link</a>
<iframe src="javascript:alert(1)"></iframe><svg onload="window.__pwned='svg'"></svg>
**<u>still text</u>**
"""

NOTES_TASK = {"subagent_type": "general-purpose", "description": "Write the notes", "prompt": "notes"}
SCAN_TASK = {"subagent_type": "explore", "description": "Find the release script", "prompt": "scan"}
REVIEW_TASK = {"subagent_type": "explore", "description": "Review the notes", "prompt": "review"}


def first_user_text(body: dict[str, Any]) -> str:
    content = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


class ReleaseTeam:
    """The model of every agent. The lead starts 'notes' and 'scan' in one turn (they meet at a
    barrier, so they are live at the same time), then 'review' alone, then answers FINAL. A prompt
    with 'hostile' is answered HOSTILE at once; a batch item lists the folder and completes.
    'scan' completes only once `scan_may_finish` is set (it is, unless a test clears it). The batch
    item 'item again' meets a model error after its write in its first attempt (the item is retried)."""

    def __init__(self) -> None:
        self.both_live = threading.Barrier(2, timeout=60)
        self.scan_may_finish = threading.Event()
        self.scan_may_finish.set()
        self.failed_once = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply | Fault:
        first = body["messages"][-1]["role"] == "user"
        task = first_user_text(body)
        if is_lead(body):
            return self.lead(body, task, first)
        if task in ("notes", "scan") and first:
            self.both_live.wait()
        time.sleep(0.2)  # each subagent's model takes a moment
        if task == "notes":
            if first:
                return Reply(tool_calls=[("write_file", {"path": "notes.md", "content": NOTES})])
            summary = "Wrote **notes.md**:\n\n- one fix\n- <script>window.__pwned = 'summary'</script>"
            return Reply(tool_calls=[("complete", {"summary": summary, "paths": ["notes.md"]})])
        if task.startswith("item"):
            path = f"changes/{task.replace(' ', '-')}.md"
            if first:
                return Reply(tool_calls=[("write_file", {"path": path, "content": f"# {task}\n\n- <b>2</b> fixes\n"})])
            if task == "item again" and not self.failed_once.is_set():
                self.failed_once.set()
                return Fault(400, "the model refused this one")
            return Reply(tool_calls=[("complete", {"summary": f"**{task}**: 2 fixes, in `{path}`", "paths": [path]})])
        if first:
            return Reply(tool_calls=[("list_dir", {"path": "."})], prompt_tokens=40, completion_tokens=6)
        if task == "scan":
            assert self.scan_may_finish.wait(30), "the test never let 'scan' finish"
        return Reply(tool_calls=[("complete", {"summary": f"{task}: the script is `scripts/release.sh`"})])

    def lead(self, body: dict[str, Any], task: str, first: bool) -> Reply:
        results = sum(1 for m in body["messages"] if m["role"] == "tool")
        if "hostile" in task:
            return Reply(content=HOSTILE)
        if first:
            return Reply(
                content="Two things at once.",
                tool_calls=[("task", NOTES_TASK), ("task", SCAN_TASK)],
                prompt_tokens=120,
                completion_tokens=30,
            )
        time.sleep(0.15)  # the lead's model thinking: the review starts clearly after the others
        if results == 2:
            return Reply(tool_calls=[("task", REVIEW_TASK)], prompt_tokens=200, completion_tokens=20)
        return Reply(content=FINAL, prompt_tokens=260, completion_tokens=90)


@pytest.fixture
def team() -> ReleaseTeam:
    return ReleaseTeam()


@pytest.fixture
def model_server(team: ReleaseTeam) -> Iterator[OpenAIServer]:
    with OpenAIServer(team) as server:
        yield server
        team.scan_may_finish.set()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.for_workspace(tmp_path) as opened:
        yield opened


@pytest.fixture
def server(
    tmp_path: Path, store: Store, model_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveServer]:
    """The server as an operator runs it: `openai:` models, the base URL and key from the environment
    (each run's runtime builds its model, and closes it when the run ends)."""
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    settings = ServerSettings(runtime=RuntimeSettings(workspace=tmp_path, model="openai:loopback-model"))
    with LiveServer(create_app(settings, store=store)) as running:
        yield running


@pytest.fixture
def page(browser: sync_api.Browser, server: LiveServer, store: Store) -> Iterator[sync_api.Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    opened = context.new_page()
    errors: list[str] = []
    dialogs: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    opened.goto(f"{server.url}/")
    sign_in(opened, store.add_user("alice")[1])
    yield opened
    context.close()
    assert errors == [], errors
    assert dialogs == [], dialogs


SHOTS = "DELEGATE_TEST_SCREENSHOTS"
"""The folder the pages' screenshots are also saved in (see the module)."""


def shoot(page: sync_api.Page, tmp_path: Path, name: str) -> None:
    page.evaluate("window.scrollTo(0, 0)")  # the sticky header at the top of a full-page picture
    page.screenshot(path=str(tmp_path / name), full_page=True)
    shots = os.environ.get(SHOTS)
    if shots:
        page.screenshot(path=str(Path(shots) / name), full_page=True)


def start_run(page: sync_api.Page, prompt: str) -> None:
    page.fill("#prompt", prompt)
    page.click("#start-run")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)


def start_held(page: sync_api.Page, team: ReleaseTeam) -> None:
    """Start the release run with 'scan' held back: back once 'notes' completed, 'scan' still running."""
    team.scan_may_finish.clear()
    page.fill("#prompt", "How are releases made?")
    page.click("#start-run")
    expect(page.locator("#timeline [data-agent=sub1] .tl-bar")).to_have_class("tl-bar completed", timeout=20_000)


def box(page: sync_api.Page, agent: str) -> dict[str, float]:
    """The bar's box, found and measured in one go (the timeline is redrawn as events come)."""
    found = page.evaluate(
        """(agent) => {
            const bar = document.querySelector(`#timeline [data-agent="${agent}"] .tl-bar`);
            if (!bar) return null;
            const r = bar.getBoundingClientRect();
            return { x: r.x, width: r.width };
        }""",
        agent,
    )
    assert found is not None, f"no bar for {agent}"
    return found


def test_picking_a_subagent_shows_its_calls_with_arguments_results_and_times(
    page: sync_api.Page, tmp_path: Path
) -> None:
    start_run(page, "How are releases made?")
    page.click("[data-agent=lead] [data-agent=sub1] > .node")
    detail = page.locator("#agent-detail")
    expect(detail.locator(".detail-head")).to_contain_text("sub1")
    expect(detail.locator(".detail-head")).to_contain_text("general-purpose")
    calls = detail.locator("li.call")
    expect(calls).to_have_count(2)
    write, complete = calls.nth(0), calls.nth(1)
    expect(write.locator(".call-name")).to_have_text("write_file")
    assert json.loads(write.locator(".call-args").inner_text()) == {"path": "notes.md", "content": NOTES}
    expect(write.locator(".call-result")).to_have_text(f"created notes.md ({len(NOTES)} bytes written)")
    timing = write.locator(".call-time").inner_text()
    assert timing.startswith("+") and timing.endswith(("ms", " s")), timing
    expect(complete.locator(".call-name")).to_have_text("complete")
    expect(complete.locator(".call-args")).to_contain_text('"paths": [\n    "notes.md"\n  ]')
    expect(detail.locator(".turn")).to_have_count(2)  # the model's two answers, with their tokens
    expect(detail.locator(".turn").first).to_contain_text("15 tokens")
    expect(detail.locator(".detail-head .meta")).to_contain_text("20 in · 10 out tokens")

    # The lead's `task` calls lead to the subagents they started.
    page.click("#timeline [data-agent=lead]")
    lead_calls = detail.locator("li.call")
    expect(lead_calls).to_have_count(3)
    expect(lead_calls.nth(1).locator(".call-args")).to_contain_text("Find the release script")
    lead_calls.nth(1).get_by_role("button", name="open sub2").click()
    expect(detail.locator(".detail-head")).to_contain_text("sub2")
    expect(detail.locator("li.call .call-name").first).to_have_text("list_dir")
    expect(detail.locator("li.call .call-result").first).to_contain_text("./")  # the folder listed
    assert page.url.endswith("/sub2")  # the pick is in the address: a reload shows it again
    page.focus("#timeline [data-agent=sub3]")
    page.keyboard.press("Enter")  # a timeline row is picked with the keyboard too
    expect(detail.locator(".detail-head")).to_contain_text("sub3")
    page.click("#timeline [data-agent=sub2]")
    shoot(page, tmp_path, "web-drilldown.png")


def test_the_timeline_overlaps_parallel_subagents_and_not_a_later_one_also_after_a_reload(
    page: sync_api.Page, tmp_path: Path
) -> None:
    start_run(page, "How are releases made?")
    expect(page.locator("#timeline .tl-row")).to_have_count(4)
    page.click("#timeline [data-agent=sub3]")
    expect(page.locator("#agent-detail .detail-desc")).to_have_text("Review the notes")
    shoot(page, tmp_path, "web-run.png")
    for reloaded in (False, True):
        if reloaded:
            page.reload()
            expect(page.locator("#run-final h2")).to_have_text("How releases are made")
            expect(page.locator("#timeline .tl-bar.completed")).to_have_count(4)
            expect(page.locator("#agent-detail .detail-head")).to_contain_text("sub3")
            expect(page.locator("#timeline [data-agent=sub3]")).to_have_class("tl-row selected clickable")
        notes, scan, review, lead = (box(page, a) for a in ("sub1", "sub2", "sub3", "lead"))
        assert notes["x"] < scan["x"] + scan["width"] and scan["x"] < notes["x"] + notes["width"]  # overlap
        assert review["x"] >= max(notes["x"] + notes["width"], scan["x"] + scan["width"])  # after both
        assert lead["x"] <= notes["x"] and lead["x"] + lead["width"] >= review["x"] + review["width"]
        for agent in ("sub1", "sub2", "sub3", "lead"):
            expect(page.locator(f"#timeline [data-agent={agent}] .tl-bar")).to_have_class("tl-bar completed")
    expect(page.locator("#timeline [data-agent=sub1] .tl-note")).to_have_text("30 tok")
    expect(page.locator("#stat-total")).to_have_text(f"{120 + 30 + 200 + 20 + 260 + 90 + 6 * 15 + 2 * (46 - 15):,}")
    expect(page.locator("#stat-cost")).to_have_text("—")  # the loopback model has no price: no guess
    expect(page.locator("[data-agent=sub1] > .node .meta")).to_contain_text("· —")
    expect(page.locator("#agent-detail li.call .call-name").first).to_have_text("list_dir")


def test_a_delivered_file_shows_its_size_and_previews_as_escaped_text(page: sync_api.Page, tmp_path: Path) -> None:
    start_run(page, "How are releases made?")
    page.click("#timeline [data-agent=sub1]")
    files = page.locator("#agent-detail .file-list li")
    expect(files).to_have_count(1)
    expect(files.locator(".file-path")).to_have_text("notes.md")
    expect(files.locator(".file-size")).to_have_text(f"{len(NOTES)} B")
    files.get_by_role("button", name="Preview").click()
    preview = page.locator("#agent-detail .preview-text")
    expect(preview).to_have_text(NOTES)
    assert preview.locator("*").count() == 0  # the <b> and <script> of the file are text
    assert page.evaluate("window.__pwned") is None
    summary = page.locator("#agent-detail .md")
    expect(summary.locator("strong")).to_have_text("notes.md")
    expect(summary.locator("li")).to_have_count(2)
    assert summary.locator("script").count() == 0
    shoot(page, tmp_path, "web-preview.png")


def test_the_final_answer_renders_as_markdown(page: sync_api.Page) -> None:
    start_run(page, "How are releases made?")
    final = page.locator("#run-final .md")
    expect(final.locator("h2")).to_have_text("How releases are made")
    expect(final.locator("strong code")).to_have_text("scripts/release.sh")
    expect(final.locator("ol > li")).to_have_count(2)
    expect(final.locator("ol > li ul > li")).to_have_count(2)
    expect(final.locator("em")).to_have_text("Update")
    expect(final.locator("a")).to_have_attribute("href", "https://example.com/notes.md")
    expect(final.locator("table tbody tr")).to_have_count(2)
    expect(final.locator("table td").nth(2)).to_have_css("text-align", "right")
    expect(final.locator("pre code")).to_have_text("./scripts/release.sh 1.4.0")


def test_hostile_markdown_in_a_final_answer_renders_inert(page: sync_api.Page, tmp_path: Path) -> None:
    start_run(page, "write a hostile report")
    final = page.locator("#run-final .md")
    expect(final.locator("h1")).to_have_text("Report")
    for tag in ("script", "img", "iframe", "svg", "u", "[onerror]", "[onclick]", "[onload]"):
        assert final.locator(tag).count() == 0, tag
    links = final.locator("a")
    expect(links).to_have_count(1)  # only the https one; the javascript: and data: ones are text
    expect(links).to_have_attribute("href", "https://example.com/ok")
    expect(final).to_contain_text('<script>window.__pwned = "script"</script>')
    expect(final).to_contain_text("click me")
    for link in final.locator("a, [href]").all():
        assert not (link.get_attribute("href") or "").lower().startswith(("javascript:", "data:"))
    final.get_by_text("click me").click()
    final.get_by_text("raw link").click()
    assert page.evaluate("window.__pwned") is None
    shoot(page, tmp_path, "web-hostile.png")


def test_the_batch_page_draws_a_bar_per_item_over_time(
    page: sync_api.Page, tmp_path: Path, server: LiveServer, store: Store
) -> None:
    page.click("nav >> text=Batches")
    page.select_option("#batch-type", "general-purpose")
    page.fill("#batch-title", "Changelog per package")
    page.fill("#batch-running", "2")
    page.fill("#batch-items", "\n".join(json.dumps({"key": f"pkg-{n}", "prompt": f"item {n}"}) for n in range(6)))
    page.click("text=Submit batch")
    row = page.locator("#batch-table tbody tr", has_text="Changelog per package")
    expect(row).to_contain_text("completed", timeout=30_000)
    expect(row.locator("[data-label=Tokens]")).to_have_text(f"{6 * 2 * 15}")  # two answers an item
    expect(row.locator("[data-label=Cost]")).to_have_text("—")  # the loopback model has no price
    expect(row.locator("[data-label=Time]")).to_have_text(re.compile(r"^[\d.]+ s$"))  # from submit to end
    bars = page.locator("#item-timeline .tl-bar")
    expect(bars).to_have_count(6)
    for n in range(6):
        expect(page.locator(f"#item-timeline [data-item=pkg-{n}] .tl-bar")).to_have_class("tl-bar succeeded")
    page.click("#item-timeline [data-item=pkg-2]")  # or its row in the table
    detail = page.locator("#item-detail")
    expect(detail.locator(".detail-head")).to_contain_text("pkg-2")
    expect(detail.locator(".detail-head .meta")).to_contain_text("1 attempt · 2 steps")
    expect(detail.locator(".detail-head .meta")).to_contain_text("cost —")  # the loopback model has no price
    expect(detail.locator(".detail-head .meta")).not_to_contain_text("all")  # one attempt: nothing summed
    expect(detail.locator(".md strong")).to_have_text("item 2")
    expect(detail.locator(".file-list .file-path")).to_have_text("changes/item-2.md")
    detail.get_by_role("button", name="Preview").click()
    expect(detail.locator(".preview-text")).to_have_text("# item 2\n\n- <b>2</b> fixes\n")
    expect(page.locator("#item-table tr.selected")).to_contain_text("pkg-2")
    turns = detail.locator(".item-turns")  # its subagent's model calls and tool calls, as a run's subagent's
    expect(turns.locator("li.call .call-name")).to_have_text(["write_file", "complete"])
    expect(turns.locator("li.call").first.locator(".call-args")).to_contain_text('"path": "changes/item-2.md"')
    expect(turns.locator("li.call").first.locator(".call-result")).to_contain_text("created changes/item-2.md")
    expect(turns.locator(".turn")).to_have_count(2)
    expect(turns.locator(".turn").first).to_contain_text("15 tokens")
    expect(turns.locator(".turn").first).to_contain_text("loopback-model")
    batch_id = page.locator("#batch-table tbody tr").first.get_attribute("data-batch")
    other = {"Authorization": f"Bearer {store.add_user('bob')[1]}"}
    with httpx2.Client(base_url=server.url, headers=other, timeout=30) as client:  # another user's: not found
        assert client.get(f"/api/v1/batches/{batch_id}/turns", params={"key": "pkg-2"}).status_code == 404
    shoot(page, tmp_path, "web-batch.png")
    page.reload()  # the batch, its timeline and the item picked read back from the server
    expect(page.locator("#item-timeline .tl-bar.succeeded")).to_have_count(6)
    expect(page.locator("#item-detail .detail-head")).to_contain_text("pkg-2")
    expect(page.locator("#item-timeline [data-item=pkg-2]")).to_have_class("tl-row selected clickable")


def test_an_item_tried_twice_shows_what_both_attempts_spent(page: sync_api.Page, team: ReleaseTeam) -> None:
    page.click("nav >> text=Batches")
    page.select_option("#batch-type", "general-purpose")
    page.fill("#batch-title", "Tried again")
    page.fill("#batch-items", json.dumps({"key": "again", "prompt": "item again"}))
    page.click("text=Submit batch")
    row = page.locator("#batch-table tbody tr", has_text="Tried again")
    expect(row).to_contain_text("completed", timeout=30_000)
    page.click("#item-timeline [data-item=again]")
    meta = page.locator("#item-detail .detail-head .meta")
    # attempt 1: the write's answer (10 in, 5 out), then the model's error; attempt 2: the write's
    # and complete's answers: 30 in and 15 out in all, of which the last attempt's record has 20 and 10
    expect(meta).to_contain_text("2 attempts")
    expect(meta).to_contain_text("30 in · 15 out tokens")
    expect(meta).to_contain_text("spent over all 2 attempts")
    turns = page.locator("#item-detail .item-turns")  # the last attempt's: its write, then its end
    expect(turns.locator("h4")).to_have_text("Turns of its last attempt (2) (2 tool calls)")
    expect(turns.locator("li.call .call-name")).to_have_text(["write_file", "complete"])
    assert team.failed_once.is_set()


def test_a_live_run_shows_running_bars_and_calls_and_the_files_of_subagents_done_so_far(
    page: sync_api.Page, team: ReleaseTeam
) -> None:
    start_held(page, team)
    expect(page.locator("#timeline [data-agent=sub2] .tl-bar")).to_have_class("tl-bar running")
    expect(page.locator("#timeline [data-agent=lead] .tl-bar")).to_have_class("tl-bar running")
    expect(page.locator("#run-status")).to_have_text("running")
    page.click("#timeline [data-agent=sub2]")
    detail = page.locator("#agent-detail")
    expect(detail.locator(".detail-head .badge")).to_have_text("running")
    expect(detail.locator("li.call .call-name")).to_have_text(["list_dir"])
    expect(detail.locator("li.call .call-result")).to_contain_text("./")
    page.click("#timeline [data-agent=sub1]")  # finished while the run goes on: its file is there already
    expect(detail.locator(".file-list li .file-size")).to_have_text(f"{len(NOTES)} B")
    team.scan_may_finish.set()
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    expect(page.locator("#timeline [data-agent=sub2] .tl-bar")).to_have_class("tl-bar completed")
    expect(page.locator("#timeline .tl-bar.running")).to_have_count(0)


PAYLOADS = [
    "<script>window.__pwned = 1</script>",
    "<img src=x onerror=window.__pwned=1>",
    "[a](javascript:window.__pwned=1) [b](JaVaScRiPt:alert(1)) [c]( javascript:alert(1)) [d](vbscript:x)",
    "[e](&#106;avascript:alert(1)) [f](data:text/html;base64,PHNjcmlwdD4=) [g](//evil.example/x)",
    '<https://x.example" onmouseover="window.__pwned=1> and https://y.example/"onclick="alert(1)',
    '![pic](https://x.example/y.png" onerror="window.__pwned=1) ![p](javascript:alert(1))',
    "```html\n<script>window.__pwned = 1</script>\n```\n    <iframe src=javascript:alert(1)>",
    "| <b>x</b> | y |\n|---|:-:|\n| <i onclick=alert(1)>z</i> | [w](javascript:alert(1)) |",
    "> <style>body { display: none }</style>\n> > <object data=x>",
    "*<svg onload=window.__pwned=1>* **<a href=javascript:alert(1)>x</a>** `<b>` ~~<u>~~",
    '[x](https://ok.example "title" onclick=alert(1)) [y](mailto:a@b.example)',
    "- <details open ontoggle=window.__pwned=1>\n  1. <form action=javascript:alert(1)><button>go",
    "# <h1 onclick=alert(1)>\n***\n" + "[" * 3000 + "*_`" * 3000,
    "![a chart](https://x.example/chart.png) ![x](data:image/png;base64,iVBORw0KGgo=)",
]


def test_the_markdown_renderer_makes_only_inert_elements_of_any_text(page: sync_api.Page) -> None:
    found = page.evaluate(
        """(payloads) => {
            const tags = new Set(["DIV", "P", "H1", "H2", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "PRE",
              "CODE", "BLOCKQUOTE", "HR", "A", "STRONG", "EM", "S", "BR", "TABLE", "THEAD",
              "TBODY", "TR", "TH", "TD"]);
            const attrs = new Set(["class", "href", "rel", "target", "start"]);
            const bad = [];
            const hrefs = [];
            for (const text of payloads) {
              const root = Markdown.render(text);
              document.body.append(root);
              for (const e of root.querySelectorAll("*")) {
                if (!tags.has(e.tagName)) bad.push(e.tagName);
                for (const a of e.attributes) if (!attrs.has(a.name)) bad.push(`${e.tagName}[${a.name}]`);
                if (e.hasAttribute("href")) hrefs.push(e.getAttribute("href"));
              }
              root.remove();
            }
            return { bad, hrefs, pwned: window.__pwned ?? null };
        }""",
        PAYLOADS,
    )
    assert found["bad"] == []
    assert found["pwned"] is None
    assert found["hrefs"] == [  # the bare URLs are linked by themselves, where no link parsed
        "https://x.example",  # up to the quote
        "https://y.example/%22onclick=%22alert(1)",
        "https://x.example/y.png",
        "https://ok.example",
        "mailto:a@b.example",
        "https://x.example/chart.png",  # an image, shown as a link to it
    ]


def test_text_nested_past_what_markdown_it_keeps_shows_whole_as_plain_text(page: sync_api.Page) -> None:
    texts = [">" * 120 + " deep\n\nafter", "- " * 120 + "deep\n\nafter <b>x</b>", "> " * 30 + "**fine**"]
    shown = page.evaluate(
        "(texts) => texts.map((t) => { const r = Markdown.render(t); return [r.textContent, r.innerHTML]; })", texts
    )
    assert [text for text, _ in shown[:2]] == texts[:2]  # markdown-it would drop "deep" (and "after")
    assert all(html.startswith('<p class="md-plain">') and "<b>" not in html for _, html in shown[:2])
    assert shown[2][1].count("<blockquote>") == 30 and "<strong>fine</strong>" in shown[2][1]


def test_cancelling_a_run_ends_its_bars_with_the_status_of_each_agent(page: sync_api.Page, team: ReleaseTeam) -> None:
    start_held(page, team)
    expect(page.locator("#timeline [data-agent=sub2] .tl-bar")).to_have_class("tl-bar running")
    page.click("#cancel-run")
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#timeline [data-agent=sub2] .tl-bar")).to_have_class("tl-bar cancelled")
    expect(page.locator("#timeline [data-agent=lead] .tl-bar")).to_have_class("tl-bar cancelled")
    expect(page.locator("#timeline [data-agent=sub1] .tl-bar")).to_have_class("tl-bar completed")
    page.click("#timeline [data-agent=lead]")
    durations = page.locator("#agent-detail li.call .call-dur")
    expect(durations).to_have_count(2)
    expect(durations.nth(1)).to_have_text("no result")  # the task of sub2, cut short
    assert durations.nth(0).inner_text().endswith(("ms", " s"))  # the task of sub1 had ended
