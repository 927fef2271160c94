"""Memory, todos and enabled skills on the page, in a real headless Chromium: each agent's todo
list under its line in the run's tree (live, and after a reload), and the Memory view where a
user searches, adds and forgets its own notes and enables or disables skills for its own runs,
never seeing or changing another user's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate import RuntimeSettings, Store
from delegate.memory import Notes, Reader
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.skills import SkillSettings
from delegate.testing import FunctionModel, call, is_lead, reply
from tests.loopback_server import LiveServer
from tests.test_memory_http import write_skill
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)
from tests.test_server_web import opened_page, sign_in
from tests.test_server_web import store as store

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
expect = sync_api.expect

PLAN = [
    {"content": "read the changelog", "status": "completed"},
    {"content": "cut the release", "status": "in_progress"},
    {"content": "announce it", "status": "pending"},
]


def planning(request: ModelRequest) -> ModelResponse:
    """The lead writes its plan, delegates, then answers; the subagent writes its own list."""
    done = [r for m in request.messages for r in m.tool_results]
    if is_lead(request):
        if not done:
            return call("todo_write", todos=PLAN)
        if len(done) == 1:
            return call("task", subagent_type="general-purpose", description="Tag it", prompt="tag the release")
        return reply("Released.")
    if not done:
        return call("todo_write", todos=[{"content": "push the tag", "status": "in_progress"}])
    return call("complete", summary="tagged")


@pytest.fixture
def server(tmp_path: Path, store: Store) -> Iterator[LiveServer]:
    for name in ("pdf", "review"):
        write_skill(tmp_path, name)
    settings = ServerSettings(
        runtime=RuntimeSettings(workspace=tmp_path), model=lambda _: FunctionModel(planning), run_batches=False
    )
    with LiveServer(create_app(settings, store=store)) as running:
        yield running


@pytest.fixture
def page(browser: sync_api.Browser, server: LiveServer) -> Iterator[sync_api.Page]:
    yield from opened_page(browser, server)


def test_each_agents_todo_list_shows_under_its_line_in_the_run_tree(page: sync_api.Page, store: Store) -> None:
    _, token = store.add_user("alice")
    sign_in(page, token)
    page.fill("#prompt", "Release it")
    page.click("#start-run")
    expect(page.locator("#run-final")).to_have_text("Released.", timeout=20_000)
    lead = page.locator("[data-agent=lead] > .todos li")
    sub = page.locator("[data-agent=lead] [data-agent=sub1] > .todos li")
    expected = ["[x] read the changelog", "[>] cut the release", "[ ] announce it"]
    expect(lead).to_have_text(expected)
    expect(page.locator("[data-agent=lead] > .todos li.in_progress")).to_have_text("[>] cut the release")
    expect(sub).to_have_text(["[>] push the tag"])  # its own list, never the lead's
    page.reload()
    expect(lead).to_have_text(expected)  # drawn again from the stored events


def test_a_user_searches_adds_and_forgets_its_own_notes_and_chooses_its_skills(
    page: sync_api.Page, store: Store, tmp_path: Path
) -> None:
    alice, token = store.add_user("alice")
    bob, _ = store.add_user("bob")
    notes = Notes(store)
    notes.write(Reader(alice, str(tmp_path)), "Deploys go through the staging cluster first.")
    notes.write(Reader(bob, str(tmp_path)), "Bob's secret: the staging password.")
    sign_in(page, token)
    page.click("nav >> text=Memory")
    rows = page.locator("#note-list .note")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Deploys go through the staging cluster first.")
    page.fill("#note-text", "Releases are cut by scripts/release.sh.")
    page.click("#add-note")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("Releases are cut by scripts/release.sh.")
    page.fill("#note-query", "staging")
    page.press("#note-query", "Enter")
    expect(rows).to_have_count(1)  # bob's note matches too, and is never shown
    expect(rows.first).to_contain_text("staging cluster")
    rows.first.locator("text=Forget").click()
    expect(page.locator("#note-list-empty")).to_have_text("No note matches “staging”.")
    assert [n.text for n in notes.latest(Reader(alice))] == ["Releases are cut by scripts/release.sh."]
    assert len(notes.latest(Reader(bob))) == 1

    skills = page.locator("#skill-table tbody tr")
    expect(skills).to_have_count(2)
    pdf = page.locator("#skill-table tr[data-skill=pdf]")
    expect(pdf.locator("input[type=checkbox]")).to_be_checked()
    pdf.locator("input[type=checkbox]").uncheck()
    expect(pdf.locator(".whose")).to_have_text("your choice")
    expect(pdf.locator("input[type=checkbox]")).not_to_be_checked()
    settings = SkillSettings(store)
    assert "pdf" in settings.disabled(alice) and "pdf" not in settings.disabled(bob)  # alice's choice alone
    pdf.locator("text=Use default").click()
    expect(pdf.locator(".whose")).to_have_text("the default")
    expect(pdf.locator("input[type=checkbox]")).to_be_checked()
