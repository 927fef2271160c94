"""The runtime of an evaluation's attempt: an arm's configuration over the operator's settings, in
the attempt's own folder (see `delegate.eval`). The one place an attempt's `Runtime` is built."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..eval import Arm, AttemptFactory
from ._runtime import Runtime
from ._settings import RuntimeSettings

if TYPE_CHECKING:
    from .._store import Store

__all__ = ["attempt_factory"]


def attempt_factory(settings: RuntimeSettings, store: Store, user_id: str | None = None) -> AttemptFactory:
    """Builds each attempt's runtime from `settings` and its arm, recording into `store` as
    `user_id`'s runs. The attempt's folder is its workspace; definitions, skills, settings files and
    model aliases are read from the operator's workspace first (`Extensions.shared`), the folder's
    own (the task's starting files) shadowing them by name, as for a user of `delegate serve`."""

    def build(arm: Arm, folder: Path) -> Runtime:
        return Runtime(
            model=arm.model or settings.model,
            workspace=folder,
            lead=arm.lead(settings.lead),
            subagents=settings.subagents,
            limits=arm.limits(settings.limits),
            loop=settings.loop,
            extensions=replace(arm.extensions(settings.extensions), shared=settings.root),
            commands=settings.commands,
            store=store,
            user_id=user_id,
        )

    return build
