"""The lead's batch tools: `batch_task`, `batch_status`, `cancel_batch`.

They answer at once and briefly: a batch id and counts, never an item's output, so thousands of
results never reach the lead's context. A batch does not count towards the run's `task` total. The
batch runs in whatever `BatchWorker` serves the store (in this process or another).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .._config import RunLimits
from .._errors import ToolError, UserError
from ..models import IdChoice
from ..tools import Tool, ToolContext, ToolReturn
from ..workspace import Home
from ._model import MAX_ITEMS, MAX_LIVE_ITEMS, MAX_RUNNING_ITEMS, ItemInput
from ._store import Batches

_T = TypeVar("_T")
KnownTypes = Iterable[str] | Callable[[], Iterable[str]] | None


LIMITS = (
    "Run limits by name, each a number: "
    + ", ".join(f.name for f in fields(RunLimits))
    + " (cost_budget in US dollars, timeouts in seconds)."
)
"""What the `limits` of `batch_task` and of its items may name: every `RunLimits` field."""


class BatchItemArg(BaseModel):
    """One item of `batch_task`, as the model writes it."""

    model_config = ConfigDict(extra="forbid")

    key: Annotated[str, Field(description="A unique key for the item (a file name, an id).")]
    prompt: Annotated[str, Field(description="The complete, self-contained task for the subagent.")]
    acceptance_criteria: Annotated[
        list[str] | None,
        Field(description="Completion conditions, e.g. 'file:outputs/x.md non-empty'."),
    ] = None
    limits: Annotated[
        dict[str, int | float] | None, Field(description=f"This item's own, tighter than the batch's. {LIMITS}")
    ] = None


BATCH_ID = r"\b[0-9a-f]{16}\b"
"""What a batch id looks like, for grounding `batch_id` in the ids a conversation names."""


def batch_tools(
    batches: Batches,
    *,
    known_types: KnownTypes = None,
    model: str | None = None,
    known_batches: Iterable[str] = (),
) -> list[Tool]:
    """The three tools, bound to `batches`. `known_types` (or a function giving them) limits
    `subagent_type` to the catalogue the lead may use; None accepts any type. `model` is recorded
    with each batch submitted, and the workers that run it use it (not their own default).
    `known_batches` are the ids of batches that exist: with the ids the conversation names, what
    a constrained model may put in `batch_id` (see `ToolSpec.id_params`)."""

    async def batch_task(
        ctx: ToolContext,
        title: Annotated[str, Field(description="What the batch does, in a few words.")],
        subagent_type: Annotated[str, Field(description="The type of subagent that runs every item.")],
        items: Annotated[list[BatchItemArg], Field(description=f"The items, at most {MAX_ITEMS}.")],
        max_live_items: Annotated[
            int | None, Field(description=f"Items claimed at once (1-{MAX_LIVE_ITEMS}); default 100.")
        ] = None,
        max_running_items: Annotated[
            int | None, Field(description=f"Items running at once (1-{MAX_RUNNING_ITEMS}); default 3.")
        ] = None,
        limits: Annotated[dict[str, int | float] | None, Field(description=f"Every item's. {LIMITS}")] = None,
    ) -> ToolReturn:
        """Run many independent, idempotent or read-only items durably, each as a subagent.

        Answers at once with a batch id; the batch runs independently and survives restarts. Use
        batch_status to follow it. Do not start `task` calls for these items.
        """
        types = known_types() if callable(known_types) else known_types
        home = await asyncio.to_thread(Home.of, ctx.workspace.root)  # its items run in this run's folder
        submission = await _told(
            batches.submit,
            ctx.user_id,
            title=title,
            subagent_type=subagent_type,
            items=[
                ItemInput(key=i.key, prompt=i.prompt, acceptance_criteria=i.acceptance_criteria, limits=i.limits or {})
                for i in items
            ],
            limits=limits,
            max_live_items=max_live_items,
            max_running_items=max_running_items,
            run_id=ctx.run_id,
            tool_call_id=ctx.tool_call_id,
            model_call_id=ctx.model_call_id,
            known_types=types,
            model=model,
            home=home,
        )
        batch = submission.batch
        if submission.created:
            ctx.event(
                "batch.submitted",
                {"batch_id": batch.id, "title": batch.title, "items": batch.total},
                tool_call_id=ctx.tool_call_id,
            )
            text = (
                f"Batch {batch.id} accepted with {batch.total} items. It is running independently and "
                f"survives restarts. Follow it with batch_status(batch_id={batch.id!r}); do not start "
                "task calls for these items."
            )
        else:
            text = (
                f"Batch {batch.id} was already accepted for this tool call, with {batch.total} items; "
                f"it is {batch.status}. Follow it with batch_status(batch_id={batch.id!r})."
            )
        return ToolReturn(content=text, keep=f"batch {batch.id}: {batch.total} items", data=batch.to_dict())

    async def batch_status(
        ctx: ToolContext, batch_id: Annotated[str, Field(description="The id batch_task returned.")]
    ) -> ToolReturn:
        """The status of a batch and how many of its items are in each status."""
        batch = await _told(batches.get, ctx.user_id, batch_id)
        return ToolReturn(content=batch.render(), data=batch.to_dict())

    async def cancel_batch(
        ctx: ToolContext, batch_id: Annotated[str, Field(description="The id batch_task returned.")]
    ) -> ToolReturn:
        """Cancel a batch: queued items never start, running ones are stopped. It cannot be undone."""
        batch = await _told(batches.cancel, ctx.user_id, batch_id)
        return ToolReturn(content=f"Cancelled. {batch.render()}", data=batch.to_dict())

    tools = [Tool.from_function(f) for f in (batch_task, batch_status, cancel_batch)]
    batch_ids = IdChoice(known=tuple(known_batches), pattern=BATCH_ID)
    for one in tools[1:]:
        one.spec.id_params = {"batch_id": batch_ids}
    listed = known_types() if callable(known_types) else known_types
    if listed is not None:
        tools[0].spec.id_params = {"subagent_type": IdChoice(known=tuple(listed))}
    return tools


async def _told(call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """`call` run off the event loop; what it refuses (`UserError`) is a failed tool result the model reads."""
    try:
        return await asyncio.to_thread(call, *args, **kwargs)
    except UserError as exc:
        raise ToolError(str(exc)) from None
