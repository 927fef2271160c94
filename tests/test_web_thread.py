"""A thread on the web page, in a real headless Chromium against a real server: the conversation
(each turn's prompt, its subagents folded under it, its answer), the thread's uploads, and the
reply box under the last answer, which continues the thread."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.testing import is_lead
from tests.loopback_openai import OpenAIServer
from tests.test_threads_cli import thread_responder
from tests.test_web_run import browser, expect, page, server, shoot, store, sync_api

__all__ = ["browser", "page", "server", "store"]  # the fixtures, used here too


@pytest.fixture
def model_server() -> Iterator[OpenAIServer]:
    """Every agent's model: the lead delegates one look a turn and answers naming its prompt."""
    with OpenAIServer(thread_responder) as served:
        yield served


def test_a_thread_reads_as_a_conversation_and_the_reply_box_under_the_last_answer_continues_it(
    page: sync_api.Page, model_server: OpenAIServer, tmp_path: Path
) -> None:
    first = page.evaluate(
        """async () => (await api("POST", "/runs", {
            prompt: "map the auth flow", uploaded_files: [{ filename: "notes.txt", path: "notes.txt" }],
        })).run_id"""
    )
    page.evaluate("(id) => { location.hash = `#/runs/${id}`; }", first)
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    thread = page.locator("#thread")
    expect(thread.locator(".thread-turn")).to_have_count(0)  # one turn: the run above is all of it
    expect(page.locator("#run-final")).to_have_text("Answer to map the auth flow.")
    expect(thread.locator("#thread-uploads")).to_contain_text("notes.txt")

    page.fill("#reply-prompt", "now fix the second point")
    page.click("#reply-send")
    page.wait_for_function("(id) => !location.hash.endsWith(id)", arg=first)
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    turns = thread.locator(".thread-turn")
    expect(turns).to_have_count(2)
    one, two = turns.nth(0), turns.nth(1)
    expect(one.locator(".thread-prompt")).to_have_text("map the auth flow")
    expect(one.locator(".thread-answer")).to_have_text("Answer to map the auth flow.")
    subs = one.locator("details.thread-subs")
    expect(subs.locator("summary")).to_have_text("1 subagent")
    expect(subs.locator(".thread-sub-summary")).to_be_hidden()  # folded under its turn
    subs.locator("summary").click()
    expect(subs.locator(".thread-sub-summary")).to_have_text("looked into it")
    expect(two.locator(".thread-prompt")).to_have_text("now fix the second point")
    expect(two.locator(".thread-answer")).to_have_text("Its answer is the final answer above.")  # once
    expect(page.locator("#run-final")).to_have_text("Answer to now fix the second point.")
    expect(two).to_have_class("thread-turn on-screen")
    expect(page.locator("#reply-send")).to_be_enabled()  # under the last answer, for the next turn
    expect(thread.locator("#thread-uploads")).to_contain_text("notes.txt")
    shoot(page, tmp_path, "web-thread.png")

    second_turn = [b for b in model_server.requests if is_lead(b)][-1]
    assert "Answer to map the auth flow." in json.dumps(second_turn)  # the model saw the first exchange
