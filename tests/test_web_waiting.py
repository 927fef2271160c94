"""A run that waits for a person, in a real headless Chromium: its page and the runs list say how
many subagents are at work and how long it has gone on (before, the list read `0` subagents and
no time while three subagents waited for their approvals)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate import Extensions, Permissions, RuntimeSettings, Store
from delegate.server import ServerSettings, create_app
from tests.approvals_support import Writers
from tests.durable_support import wait_for
from tests.loopback_openai import OpenAIServer
from tests.loopback_server import LiveServer
from tests.test_server_web import CHROMIUM, sign_in
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
expect = sync_api.expect


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.for_workspace(tmp_path) as opened:
        yield opened


@pytest.fixture
def page(
    browser: sync_api.Browser, tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> Iterator[sync_api.Page]:
    with OpenAIServer(Writers("a.md", "b.md", "c.md")) as model_server:
        monkeypatch.setenv("OPENAI_BASE_URL", model_server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        ask = Extensions(permissions=Permissions(ask=["Write"]))
        runtime = RuntimeSettings(workspace=tmp_path, model="openai:loopback-model", extensions=ask)
        with LiveServer(create_app(ServerSettings(runtime=runtime), store=store)) as server:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            opened = context.new_page()
            errors: list[str] = []
            opened.on("pageerror", lambda exc: errors.append(str(exc)))
            opened.goto(f"{server.url}/")
            sign_in(opened, store.add_user("alice")[1])
            yield opened
            context.close()
            assert errors == [], errors


def test_a_waiting_run_shows_its_running_subagents_and_its_time_so_far_on_its_page_and_in_the_list(
    page: sync_api.Page, store: Store
) -> None:
    page.fill("#prompt", "write the notes")
    page.click("#start-run")
    expect(page.locator("#run-status")).to_have_text("waiting", timeout=30_000)
    expect(page.locator("#approvals .approval")).to_have_count(3, timeout=30_000)
    expect(page.locator("#stat-subagents")).to_have_text("3")
    clock = page.locator("#stat-time")
    expect(clock).to_have_text(re.compile(r"^\d"), timeout=5_000)  # a time, not "–"
    first = clock.inner_text()
    expect(clock).not_to_have_text(first, timeout=5_000)  # and it goes on
    expect(page.locator("#timeline .tl-bar.running")).to_have_count(4)  # the lead and its three

    wait_for(lambda: [r for r in store.listing() if r.running_subagents == 3], 30, "3 subagents at work, stored")
    page.click("nav >> text=Runs")
    row = page.locator("#runs-table tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("[data-label=Status]")).to_have_text("waiting")
    expect(row.locator("[data-label=Subagents]")).to_have_text("3 3 running")
    expect(row.locator("[data-label=Duration]")).to_contain_text(" so far")
