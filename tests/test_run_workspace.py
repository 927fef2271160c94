"""Runs stay with their files (issue 34, item 7): a run records the folder it works in, and a
process whose workspace is another folder (a second server on the same store, `delegate run
--resume` elsewhere) leaves it alone, saying why, instead of running it without its files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from delegate import Runtime, Store, UserError
from delegate.testing import FunctionModel, reply


def test_a_run_is_never_resumed_in_another_folder_than_its_own(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    with Store.open(f"sqlite:///{tmp_path / 'shared.db'}") as store:
        run = store.create_run(prompt="write the notes", model="m", workspace=str(first.resolve()))
        assert run.owner is not None and store.release_run(run.id, run.owner)
        elsewhere = Runtime(model=FunctionModel(lambda _: reply("done")), workspace=second, store=store)
        with pytest.raises(UserError, match=f"works in {first.resolve()}, not {second.resolve()}"):
            asyncio.run(elsewhere.resume(run.id))
        assert store.get_run(run.id).status == "interrupted"  # type: ignore[union-attr]
        at_home = Runtime(model=FunctionModel(lambda _: reply("done")), workspace=first, store=store)
        assert asyncio.run(at_home.resume(run.id)).status == "completed"
    assert list(second.iterdir()) == [] or all(p.name == ".delegate" for p in second.iterdir())
