"""The page's runs table in a real headless Chromium: its columns, search, status filter, paging,
the signed-in user's name, and stacked rows on a narrow screen."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from delegate import Store
from delegate._usage import Usage
from tests.loopback_server import LiveServer
from tests.test_server_api import subagent_record
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)
from tests.test_server_web import server as server  # the app with fake models, on loopback
from tests.test_server_web import sign_in
from tests.test_server_web import store as store

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
expect = sync_api.expect


def open_page(browser: sync_api.Browser, server: LiveServer, token: str, width: int) -> Iterator[sync_api.Page]:
    context = browser.new_context(viewport={"width": width, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.goto(f"{server.url}/")
    sign_in(opened, token)
    yield opened
    context.close()
    assert errors == [], errors


@pytest.fixture
def alice(store: Store) -> tuple[str, str]:
    """alice's id and token, with 25 finished runs (a page holds 20) and one of bob's."""
    user_id, token = store.add_user("alice")
    for n in range(24):
        run = store.create_run(prompt=f"Summarise chapter {n}", model="test:small", user_id=user_id)
        store.finish_run(
            run.id, "completed" if n % 3 else "error", "done", Usage(input_tokens=n, output_tokens=1, cost_usd=None)
        )
    priced = store.create_run(prompt="Price the FRUIT basket", model="openai:gpt-4o", user_id=user_id)
    records = [subagent_record("a", "completed"), subagent_record("b", "error")]
    store.add_subagent_records(priced.id, records)
    store.finish_run(priced.id, "completed", "3 apples", Usage(input_tokens=1000, output_tokens=234, cost_usd=0.01234))
    bob = store.add_user("bob")[0]
    store.create_run(prompt="bob's secret chapter", model="test", user_id=bob)
    return user_id, token


@pytest.fixture
def page(browser: sync_api.Browser, server: LiveServer, alice: tuple[str, str]) -> Iterator[sync_api.Page]:
    yield from open_page(browser, server, alice[1], 1280)


def cells(page: sync_api.Page, row: int) -> list[str]:
    return page.locator("#runs-table tbody tr").nth(row).locator("td").all_inner_texts()


def test_the_table_shows_each_runs_status_model_subagents_tokens_cost_and_duration(page: sync_api.Page) -> None:
    expect(page.locator("#account-name")).to_have_text("alice")
    rows = page.locator("#runs-table tbody tr")
    expect(rows).to_have_count(20)
    headers = page.locator("#runs-table th").all_inner_texts()
    assert [h.lower() for h in headers] == ["prompt", "status", "model", "subagents", "tokens", "cost", "duration"]
    prompt, status, model, subagents, tokens, cost, duration = cells(page, 0)
    assert (prompt, status, model) == ("Price the FRUIT basket", "completed", "openai:gpt-4o")
    assert subagents == "2 1 failed"
    assert (tokens, cost) == ("1,234", "$0.0123")
    assert duration.endswith(" s")
    assert cells(page, 1)[:6] == ["Summarise chapter 23", "completed", "test:small", "0", "24", "—"]  # no price
    expect(rows.nth(1).locator(".badge.failed")).to_have_count(0)


def test_search_and_the_status_filter_narrow_the_table_and_never_show_another_users_runs(page: sync_api.Page) -> None:
    rows = page.locator("#runs-table tbody tr")
    page.fill("#runs-search", "fruit")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Price the FRUIT basket")
    page.fill("#runs-search", "chapter")
    expect(rows).to_have_count(20)
    page.select_option("#runs-status", "error")
    expect(rows).to_have_count(8)  # chapters 0, 3, ..., 21
    assert all(cells(page, n)[1] == "error" for n in range(8))
    assert not any("bob" in text for text in rows.all_inner_texts())
    page.fill("#runs-search", "chapter 21")
    expect(rows).to_have_count(1)
    page.fill("#runs-search", "no such run")
    expect(page.locator("#runs-table-empty")).to_be_visible()


def test_paging_moves_through_more_runs_than_a_page_holds(page: sync_api.Page) -> None:
    rows = page.locator("#runs-table tbody tr")
    expect(rows).to_have_count(20)
    expect(page.locator("#runs-prev")).to_be_disabled()
    first = rows.all_inner_texts()
    page.click("#runs-next")
    expect(rows).to_have_count(5)
    expect(page.locator("#runs-next")).to_be_disabled()
    expect(page.locator("#runs-page")).to_have_text("21–25")
    assert cells(page, 4)[0] == "Summarise chapter 0"  # the oldest, last
    assert not set(rows.all_inner_texts()) & set(first)
    page.click("#runs-prev")
    expect(rows).to_have_count(20)
    expect(rows.first).to_contain_text("Price the FRUIT basket")
    rows.nth(3).click()
    expect(page.locator("#run-detail")).to_be_visible()
    expect(page.locator("#run-prompt")).to_have_text("Summarise chapter 21")


def test_on_a_narrow_screen_each_run_reads_as_a_stack_of_labelled_lines(
    browser: sync_api.Browser, server: LiveServer, alice: tuple[str, str]
) -> None:
    for narrow in open_page(browser, server, alice[1], 390):
        first = narrow.locator("#runs-table tbody tr").first
        expect(first).to_contain_text("Price the FRUIT basket")
        expect(narrow.locator("#runs-table thead")).to_be_hidden()
        boxes = [cell.bounding_box() for cell in first.locator("td").all()]
        assert all(box is not None and box["x"] + box["width"] <= 390 for box in boxes)  # nothing off-screen
        tops = [box["y"] for box in boxes if box is not None]
        assert tops == sorted(tops) and len(set(tops)) == 7  # one line each, in order
        label = first.locator("td").nth(5).evaluate("td => getComputedStyle(td, '::before').content")
        assert label == '"Cost"'
        assert narrow.evaluate("document.documentElement.scrollWidth") <= 390
