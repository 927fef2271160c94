"""What things cost."""

CURRENCY = "EUR"

PRICES = {"apple": 0.4, "pear": 0.55, "plum": 0.25}
"""The price of one item of each kind, in CURRENCY."""


def total(order: dict[str, int]) -> float:
    """What an order (kind: how many) costs."""
    # TODO: round to cents
    return sum(PRICES[name] for name in order)
