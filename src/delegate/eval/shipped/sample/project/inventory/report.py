"""A report of the stock."""

from .prices import PRICES
from .stock import Stock


def summary(stock: Stock) -> str:
    """One line per kind held: its count and its value."""
    lines = [f"{name}: {count} ({count * PRICES.get(name, 0):.2f})" for name, count in sorted(stock.items.items())]
    return "\n".join(lines)
