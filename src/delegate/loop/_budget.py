"""A run's budget: what the lead and every subagent together may spend, and what each model request
reserves of it before it starts (see `RunBudget`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .._config import RunLimits
from .._record import StopReason
from .._usage import Usage
from ..models import Model, request_cost

Reserve = tuple[int, float]
"""What a model request reserves of a run's budget: tokens and US dollars (see `RunBudget`)."""
NOTHING: Reserve = (0, 0.0)


@dataclass(kw_only=True)
class RunBudget:
    """What a whole run may spend, the lead and every subagent together: `token_budget` tokens
    (input and output), `max_requests` model requests and `cost_budget` US dollars (priced by
    `genai-prices`). Under a cost budget, an answer from a model without a price spends it
    all: what the run spends can no longer be known, and a guess could overspend.

    Each request reserves what it is expected to spend before it starts (`begin`): its agent's
    context so far (the last answer's input and output tokens, which the next request holds) and
    the run's average answer, priced on its model. No request starts that the budget, less what
    was spent and what requests in flight reserved, cannot cover; its answer then spends what it
    did instead (`spend`); a request cut off (a stop, a timeout) spends its reservation, its real
    cost being unknown. So parallel agents cannot all start on the last dollar: a run passes its
    budget by at most, for each request in flight when the remainder stopped covering one, what
    that request spent past its estimate (its new input since its agent's last answer, all of it
    for an agent's first request, and its answer past the run's average)."""

    token_budget: int | None = None
    max_requests: int | None = None
    cost_budget: float | None = None
    tokens: int = 0
    requests: int = 0
    cost: float = 0.0
    unpriced: str | None = None
    """The model of an answer that had no price, under a cost budget."""
    reserved_tokens: int = 0
    reserved_cost: float = 0.0
    """What the requests in flight reserved (`begin`), not yet spent."""
    answers: int = 0
    output_tokens: int = 0
    """The answers spent so far and their output tokens: the run's average answer."""

    @classmethod
    def of(cls, limits: RunLimits) -> RunBudget | None:
        """The budget of a run with these limits (None when they set none): each `RunLimits`
        field this class has a field of the same name for, read by that name."""
        given = {name: getattr(limits, name) for name in _BUDGETS}
        return cls(**given) if any(value is not None for value in given.values()) else None

    def spend(self, usage: Usage, model: str = "", reserved: Reserve = (0, 0.0)) -> None:
        """Count what an answer (or a reused subagent) spent, in place of what its request reserved."""
        self.reserved_tokens -= reserved[0]
        self.reserved_cost -= reserved[1]
        self.tokens += usage.total_tokens
        if usage.requests:
            self.answers += usage.requests - usage.requests_without_usage
            self.output_tokens += usage.output_tokens
        if usage.cost_usd is not None:
            self.cost += usage.cost_usd
        elif self.cost_budget is not None and usage.requests:
            self.unpriced = self.unpriced or model or "a model"

    def cut(self, reserved: Reserve) -> None:
        """A request that reserved `reserved` was cut off: nothing says what it spent, so its
        reservation is spent (its tokens and cost stay unknown in the agent's usage)."""
        self.reserved_tokens -= reserved[0]
        self.reserved_cost -= reserved[1]
        self.tokens += reserved[0]
        self.cost += reserved[1]

    def release(self, reserved: Reserve) -> None:
        """A request that reserved `reserved` failed with no answer (the server refused it)."""
        self.reserved_tokens -= reserved[0]
        self.reserved_cost -= reserved[1]

    def expected(self, model: Model, context_tokens: int) -> Reserve:
        """What a request of `model` over a context of `context_tokens` is expected to spend:
        those tokens and the run's average answer, and their price (0 without a cost budget or a
        price: an unpriced answer then spends the budget, see the class)."""
        output = self.output_tokens // self.answers if self.answers else 0
        cost = 0.0
        if self.cost_budget is not None and model.profile.pricing is not None:
            usage = Usage(input_tokens=context_tokens, output_tokens=output, requests=1)
            cost = request_cost(model.profile.pricing, usage, model.name.partition(":")[2]) or 0.0
        return context_tokens + output, cost

    def begin(self, reserve: Reserve = (0, 0.0)) -> StopReason | None:
        """Count a model request about to start and reserve what it is expected to spend, or
        start none and say which budget is spent (or cannot cover it, with what is reserved)."""
        tokens, cost = reserve
        if self.token_budget is not None and (
            self.tokens >= self.token_budget or self.tokens + self.reserved_tokens + tokens > self.token_budget
        ):
            return "run_token_budget"
        if self.max_requests is not None and self.requests >= self.max_requests:
            return "run_max_requests"
        if self.cost_budget is not None and (
            self.unpriced is not None
            or self.cost >= self.cost_budget
            or self.cost + self.reserved_cost + cost > self.cost_budget
        ):
            return "run_cost_budget"
        self.requests += 1
        self.reserved_tokens += tokens
        self.reserved_cost += cost
        return None

    def why(self, reason: StopReason) -> str:
        if reason == "run_token_budget":
            return f"the run spent its token budget ({self.tokens:,} of {self.token_budget:,} tokens, token_budget)"
        if reason == "run_cost_budget" and self.unpriced is not None:
            return (
                f"the run cannot keep to its cost budget: {self.unpriced} has no price in genai-prices "
                "(give every agent a priced model, or use --token-budget instead)"
            )
        if reason == "run_cost_budget":
            return (
                f"the run spent its cost budget, or what is left of it cannot cover another request "
                f"(${self.cost:.4f} of ${self.cost_budget:g}, cost_budget)"
            )
        return f"the run made the {self.max_requests:,} model requests its budget allows (max_requests)"


def cost_over(budget: float, usage: Usage, last: float | None) -> str | None:
    """Why an agent with a cost budget of its own (`budget` US dollars, having spent `usage`, its
    last answer `last`) makes no further request (None: it may). Its requests go one at a time,
    each holding at least the context of the one before: it stops once it spent its budget, or
    when what is left cannot cover a request as costly as its last. So it passes its budget by at
    most its first request, or what one request costs past the one before it. An answer without
    a price stops it: what it spends can no longer be known."""
    if not usage.requests:
        return None
    if usage.cost_usd is None:
        return (
            f"its model has no price in genai-prices, so its cost budget (${budget:g}) cannot be kept "
            "(give it a priced model, or a token_budget instead)"
        )
    if usage.cost_usd >= budget:
        return f"spent its cost budget (${usage.cost_usd:.4f} of ${budget:g}, cost_budget)"
    if last is not None and usage.cost_usd + last > budget:
        return (
            f"what is left of its cost budget (${budget - usage.cost_usd:.4f} of ${budget:g}) cannot cover "
            f"another request like its last (${last:.4f}), cost_budget"
        )
    return None


def reserve_for(budget: RunBudget | None, model: Model, context_tokens: int) -> Reserve:
    """What a request reserves of the run's budget (nothing without a token or cost budget)."""
    if budget is None or (budget.token_budget is None and budget.cost_budget is None):
        return NOTHING
    return budget.expected(model, context_tokens)


_BUDGETS = tuple(f.name for f in fields(RunBudget) if f.name in {g.name for g in fields(RunLimits)})
"""The run limits a `RunBudget` holds (`token_budget`, `max_requests`, `cost_budget`)."""
