"""A submission is checked completely before anything is stored; a rejected one stores nothing."""

from __future__ import annotations

from typing import Any

import pytest

from delegate import UserError
from delegate.batch import MAX_ITEMS, Batches, BatchValidationError, loads_json
from delegate.batch._model import validate_submission

from .batch_support import USER, batches_fixture, count_rows, items  # noqa: F401

GOOD = items(3)


def submit(batches: Batches, **changes: Any) -> None:
    arguments: dict[str, Any] = {"subagent_type": "general-purpose", "items": GOOD} | changes
    batches.submit(USER, known_types={"general-purpose", "explore"}, **arguments)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"items": [{"key": "", "prompt": "p"}]}, "empty key"),
        ({"items": [{"key": "   ", "prompt": "p"}]}, "empty key"),
        ({"items": [{"key": "a", "prompt": "p"}, {"key": "a", "prompt": "q"}]}, "duplicate key 'a'"),
        ({"items": [{"key": 7, "prompt": "p"}]}, "item 0: key is a number (7); a key is a string: write it in quotes"),
        ({"items": [{"key": ["a"], "prompt": "p"}]}, 'item 0: key is an array (["a"])'),
        ({"items": [{"key": "a", "prompt": 3}]}, "item 0 ('a'): prompt is a number; a prompt is a string"),
        (
            {"items": [loads_json('{"key": "a", "prompt": "p", "prompt": "q"}')]},
            "item 0: field(s) 'prompt' given more than once; give each field once",
        ),
        ({"items": [{"key": "a", "prompt": " \n"}]}, "empty prompt"),
        ({"items": [{"key": "a"}]}, "empty prompt"),
        ({"items": [{"key": "a", "prompt": "p", "promt": "typo"}]}, "unknown field(s) 'promt'"),
        ({"items": [{"key": "a", "prompt": "p", "acceptance_criteria": "x"}]}, "must be a list of strings"),
        ({"items": ["just a prompt"]}, "expected an object"),
        ({"items": []}, "no items"),
        ({"subagent_type": "researcher"}, "unknown subagent_type 'researcher'; available: explore, general-purpose"),
        ({"max_running_items": 0}, "max_running_items is 0; use a whole number from 1 to 1000"),
        ({"max_running_items": 1001, "max_live_items": 2000}, "max_running_items is 1001"),
        ({"max_live_items": 0}, "max_live_items is 0; use a whole number from 1 to 10000"),
        ({"max_live_items": 10_001}, "max_live_items is 10001"),
        ({"max_running_items": 5, "max_live_items": 4}, "max_running_items (5) must be at most max_live_items (4)"),
        ({"max_running_items": True}, "max_running_items is True"),
        ({"max_attempts": 0}, "max_attempts is 0; use a whole number from 1 to 10"),
        ({"title": "x" * 501}, "title is 501 characters long"),
    ],
)
def test_invalid_submission_is_rejected_with_a_reason_and_stores_nothing(
    batches: Batches, changes: dict[str, Any], problem: str
) -> None:
    with pytest.raises(BatchValidationError) as caught:
        submit(batches, **changes)
    assert problem in str(caught.value)
    assert str(caught.value).startswith("batch rejected, nothing was stored: ")
    assert isinstance(caught.value, UserError)
    assert count_rows(batches.store) == (0, 0)


def test_every_problem_is_listed_at_once(batches: Batches) -> None:
    bad = [{"key": "", "prompt": "p"}, {"key": "b", "prompt": ""}, {"key": "c", "prompt": "p"}]
    with pytest.raises(BatchValidationError) as caught:
        submit(batches, items=bad, max_running_items=0)
    assert len(caught.value.problems) == 3


def test_more_items_than_the_maximum_are_rejected(batches: Batches) -> None:
    assert MAX_ITEMS >= 100_000
    huge = ({"key": str(i), "prompt": "p"} for i in range(MAX_ITEMS + 1))
    with pytest.raises(BatchValidationError, match=f"more than {MAX_ITEMS} items"):
        submit(batches, items=huge)
    assert count_rows(batches.store) == (0, 0)


def test_the_maximum_number_of_items_is_accepted() -> None:
    spec = validate_submission(
        title=None,
        subagent_type="t",
        items=({"key": str(i), "prompt": "p"} for i in range(MAX_ITEMS)),
        max_running_items=None,
        max_live_items=None,
        max_attempts=None,
        known_types=None,
        model=None,
    )
    assert len(spec.items) == MAX_ITEMS
    assert (spec.max_running_items, spec.max_live_items, spec.max_attempts) == (3, 100, 3)


def test_defaults_raise_max_live_items_to_max_running_items(batches: Batches) -> None:
    batch = batches.submit(USER, subagent_type="t", items=GOOD, max_running_items=200).batch
    assert (batch.max_running_items, batch.max_live_items) == (200, 200)
    assert batch.title == "3 × t"
    assert count_rows(batches.store) == (1, 3)
