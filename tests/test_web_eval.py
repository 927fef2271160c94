"""Evals on the page, in a real headless Chromium: a user opens Evals, reads each arm's success
with its interval, tokens and time as the report says, which arms succeeded on each task, follows
an attempt to its run and downloads the standalone report; another user sees none of it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from delegate import RuntimeSettings, Store
from delegate.eval import Arm, EvalReport, Evaluation, load_suite
from delegate.run import attempt_factory
from delegate.server import ServerSettings, create_app
from delegate.testing import FunctionModel, reply
from tests.eval_support import write_suite
from tests.loopback_server import LiveServer
from tests.test_eval_http import answering
from tests.test_server_web import browser as browser  # the module's Chromium (a fixture)
from tests.test_server_web import opened_page, sign_in
from tests.test_server_web import store as store

sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
expect = sync_api.expect


@pytest.fixture
def server(tmp_path: Path, store: Store) -> Iterator[LiveServer]:
    settings = ServerSettings(
        runtime=RuntimeSettings(workspace=tmp_path),
        model=lambda _: FunctionModel(lambda _: reply("hi")),
        run_batches=False,
    )
    with LiveServer(create_app(settings, store=store)) as running:
        yield running


@pytest.fixture
def page(browser: sync_api.Browser, server: LiveServer) -> Iterator[sync_api.Page]:
    yield from opened_page(browser, server, accept_downloads=True)


def alices_eval(tmp_path: Path, store: Store) -> tuple[str, EvalReport]:
    """Alice's eval of the small suite with two arms, one attempt each: her token and its report."""
    alice, token = store.add_user("alice")
    settings = RuntimeSettings(workspace=tmp_path, model=FunctionModel(answering))
    root = settings.user_root(alice)
    assert root is not None
    factory = attempt_factory(settings, store, user_id=alice)
    arms = [Arm(name="single", mode="single"), Arm(name="capped", mode="single", max_steps=1)]
    evaluation = Evaluation.create(
        store, load_suite(write_suite(tmp_path)), arms, factory, root / ".delegate" / "evals", user_id=alice
    )
    with ThreadPoolExecutor(1) as thread:  # playwright's own event loop runs in this one
        return token, thread.submit(asyncio.run, evaluation.run()).result(timeout=120)


def test_a_user_reads_an_evals_arms_tasks_and_attempts_and_downloads_its_report(
    page: sync_api.Page, store: Store, tmp_path: Path
) -> None:
    token, report = alices_eval(tmp_path, store)
    data = report.to_dict()
    sign_in(page, token)
    page.click("nav a[data-view=evals]")
    row = page.locator(f"#eval-table tr[data-eval={report.eval_id}]")
    expect(row).to_contain_text("completed")
    arms = {a["arm"]: a for a in data["arms"]}
    expect(row).to_contain_text(f"single {arms['single']['succeeded']}/{arms['single']['judged']}")
    row.click()

    for name, arm in arms.items():
        line = page.locator(f"#eval-arms tr[data-arm={name}]")
        low, high = (round(100 * x) for x in arm["ci95"])
        expect(line).to_contain_text(f"{arm['succeeded']}/{arm['judged']}")
        expect(line).to_contain_text(f"95% CI {low}%-{high}%")
        expect(line).to_contain_text(f"{arm['tokens']['total']:,}")
    for task in data["tasks"]:
        for name, cell in task["arms"].items():
            shown = page.locator(f"#eval-tasks tr[data-task={task['task']}] td[data-arm={name}]")
            expect(shown).to_have_text(f"{cell['succeeded']}/{cell['judged']}")
    assert arms["single"]["succeeded"] == 2 and arms["single"]["judged"] == 3  # notes and answer; not missing.txt
    expect(page.locator("#eval-tasks tr[data-task=missing] td[data-arm=single]")).to_have_class("eval-cell none")
    missing = page.locator("#eval-attempts tr[data-attempt='single/missing/1']")
    expect(missing).to_contain_text("failed run completed")  # the run completed; its criterion did not hold
    expect(missing.locator(".eval-checks li.not-held")).to_contain_text("file:missing.txt exists: does not hold")

    with page.expect_download() as caught:
        page.click("#eval-download")
    saved = tmp_path / "report.html"
    caught.value.save_as(saved)
    assert saved.read_text().count("<svg") == 2 and report.eval_id in saved.read_text()

    attempt = next(a for a in data["attempts"] if a["arm"] == "single" and a["task"] == "notes")
    page.locator("#eval-attempts tr[data-attempt='single/notes/1'] a").click()
    expect(page).to_have_url(f"{page.url.split('#')[0]}#/runs/{attempt['run_id']}")
    expect(page.locator("#run-status")).to_have_text("completed")


def test_another_user_sees_no_eval_on_the_page(page: sync_api.Page, store: Store, tmp_path: Path) -> None:
    _, report = alices_eval(tmp_path, store)
    _, bob = store.add_user("bob")
    sign_in(page, bob)
    page.goto(f"{page.url.split('#')[0]}#/evals/{report.eval_id}")
    expect(page.locator("#eval-list-empty")).to_have_text("No evals yet.")
    expect(page.locator("#eval-error")).to_contain_text(f"no eval {report.eval_id!r}")
    assert page.locator("#eval-table tbody tr").count() == 0 and page.locator("#eval-report").is_hidden()
