"""The web UI in a real headless Chromium (Debian's `chromium` package, driven by Playwright).

CI installs the browser with `apt-get install -y chromium`; without it these tests skip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate import RuntimeSettings, Store
from delegate.models import ModelRequest, ModelResponse
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, call, is_lead, reply, respond
from tests.loopback_server import LiveServer

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def research(request: ModelRequest) -> ModelResponse:
    """Lead: two subagents of different types in one turn, then a final answer. Subagents: complete."""
    if not is_lead(request):
        return call("complete", summary=f"Found it: {request.messages[0].text}")
    if request.messages[-1].role == "user":
        return respond(
            [
                ("task", {"subagent_type": "general-purpose", "description": "Read the changelog", "prompt": "log"}),
                ("task", {"subagent_type": "explore", "description": "Find the release script", "prompt": "script"}),
            ],
            input_tokens=100,
            output_tokens=20,
        )
    return reply("Releases are cut by scripts/release.sh after the changelog is updated.")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The workspace's own SQLite store (the page does not care which database is behind the API)."""
    with Store.for_workspace(tmp_path) as opened:
        yield opened


@pytest.fixture
def server(tmp_path: Path, store: Store) -> Iterator[LiveServer]:
    model = lambda _: FunctionModel(research, latency=0.05)  # noqa: E731 - a fresh fake per run
    settings = ServerSettings(
        runtime=RuntimeSettings(workspace=tmp_path), model=model, run_batches=False
    )  # batch items stay queued
    with LiveServer(create_app(settings, store=store)) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[sync_api.Browser]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


def opened_page(browser: sync_api.Browser, server: LiveServer, **options: Any) -> Iterator[sync_api.Page]:
    """The page at `server`'s root in a fresh 1280x900 context (`options`: more of the context's);
    after the test, no script error may have happened on it. A fixture's body: `yield from` it."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, **options)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.goto(f"{server.url}/")
    yield opened
    context.close()
    assert errors == [], errors


@pytest.fixture
def page(browser: sync_api.Browser, server: LiveServer) -> Iterator[sync_api.Page]:
    yield from opened_page(browser, server)


def sign_in(page: sync_api.Page, token: str) -> None:
    page.fill("#token", token)
    page.click("text=Save token")
    sync_api.expect(page.locator("#nav")).to_be_visible()


def test_a_user_signs_in_starts_a_run_and_watches_the_subagent_tree_and_final_answer(
    page: sync_api.Page, store: Store
) -> None:
    expect = sync_api.expect
    _, token = store.add_user("alice")
    sign_in(page, token)
    page.fill("#prompt", "How are releases made?")
    page.click("#start-run")

    lead = page.locator("[data-agent=lead] > .node")
    changelog = page.locator("[data-agent=lead] [data-agent=sub1] > .node")
    script = page.locator("[data-agent=lead] [data-agent=sub2] > .node")
    expect(changelog).to_contain_text("general-purpose")
    expect(changelog).to_contain_text("Read the changelog")
    expect(script).to_contain_text("explore")
    expect(script).to_contain_text("Find the release script")
    expect(page.locator("#run-final")).to_have_text(
        "Releases are cut by scripts/release.sh after the changelog is updated.", timeout=20_000
    )
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(lead).to_contain_text("completed")
    expect(lead).to_contain_text("2 steps")
    for node in (changelog, script):
        expect(node).to_contain_text("completed")
        expect(node).to_contain_text("15 tokens")
    expect(page.locator("[data-agent=sub1] > .node-summary")).to_have_text("Found it: log")
    expect(page.locator("#stat-subagents")).to_have_text("2")
    expect(page.locator("#stat-in")).to_have_text("130")  # the lead's 100 + 10, and 10 for each subagent
    expect(page.locator("#run-list")).to_contain_text("How are releases made?")

    page.reload()  # the token was kept, and the run reads back from the server
    expect(page.locator("#run-final")).to_contain_text("scripts/release.sh")
    expect(page.locator("[data-agent=sub2] > .node")).to_contain_text("completed")


def test_an_unknown_token_is_refused_with_a_message(page: sync_api.Page) -> None:
    page.fill("#token", "not-a-token")
    page.click("text=Save token")
    sync_api.expect(page.locator("#token-error")).to_contain_text("did not accept the token")
    sync_api.expect(page.locator("#nav")).to_be_hidden()


def test_the_batches_view_shows_progress_and_cancels_a_batch(
    page: sync_api.Page, store: Store, server: LiveServer
) -> None:
    expect = sync_api.expect
    _, token = store.add_user("alice")
    sign_in(page, token)
    page.click("nav >> text=Batches")
    page.select_option("#batch-type", "explore")
    page.fill("#batch-title", "Release notes")
    page.fill("#batch-items", '{"key": "a", "prompt": "one"}\n{"key": "b", "prompt": "two"}')
    page.click("text=Submit batch")

    row = page.locator("#batch-table tbody tr", has_text="Release notes")
    expect(row).to_contain_text("explore")
    expect(row.locator(".counts")).to_contain_text("queued")
    row.get_by_role("button", name="Pause").click()
    expect(row).to_contain_text("paused")
    row.get_by_role("button", name="Cancel").click()
    expect(row).to_contain_text("cancelled")
    expect(row.locator(".counts")).to_contain_text("2 cancelled")
    expect(page.locator("#item-table")).to_contain_text("a")
    expect(page.locator("#item-table tbody tr")).to_have_count(2)


async def typed_pricing(request: ModelRequest) -> ModelResponse:
    """Lead: two pricer subagents in one turn; the first one called answers last. Subagents:
    complete with a typed result."""
    if not is_lead(request):
        item = request.messages[0].text
        if item == "mug":
            await asyncio.sleep(0.3)  # the model of the first subagent is slower than the second's
        return call("complete", summary=f"priced the {item}", result={"product": item, "price": 4.5})
    if request.messages[-1].role == "user":
        return respond(
            [
                ("task", {"subagent_type": "pricer", "description": "Price the mug", "prompt": "mug"}),
                ("task", {"subagent_type": "pricer", "description": "Price the cup", "prompt": "cup"}),
            ]
        )
    return reply("Both priced.")


def test_the_page_shows_each_typed_result_in_the_order_the_lead_called_them(
    browser: sync_api.Browser, tmp_path: Path, store: Store
) -> None:
    agents = tmp_path / ".delegate" / "agents"
    agents.mkdir(parents=True)
    (agents / "pricer.md").write_text(
        "---\nname: pricer\ndescription: Prices one product.\noutput_schema:\n  type: object\n"
        "  properties: {product: {type: string}, price: {type: number}}\n  required: [product, price]\n---\nPrice it.\n"
    )
    settings = ServerSettings(
        runtime=RuntimeSettings(workspace=tmp_path), model=lambda _: FunctionModel(typed_pricing), run_batches=False
    )
    _, token = store.add_user("alice")
    with LiveServer(create_app(settings, store=store)) as running:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(f"{running.url}/")
        sign_in(page, token)
        page.fill("#prompt", "Price the mug and the cup")
        page.click("#start-run")
        sync_api.expect(page.locator("#run-final")).to_have_text("Both priced.", timeout=20_000)
        mug = page.locator("[data-agent=lead] li").filter(has_text="Price the mug").locator("> .node-summary")
        sync_api.expect(mug).to_have_text('priced the mug\nResult: {"product":"mug","price":4.5}')
        page.reload()
        sync_api.expect(page.locator("[data-agent=lead] [data-agent] > .node-summary")).to_have_count(2)
        order = page.locator("[data-agent=lead] [data-agent] > .node .desc").all_inner_texts()
        context.close()
    assert order == ["Price the mug", "Price the cup"]
