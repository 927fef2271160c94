"""What the shop holds."""

MAX_ITEMS = 500
"""The most items the stock may hold, all kinds together."""


class Stock:
    def __init__(self) -> None:
        self.items: dict[str, int] = {}

    def add(self, name: str, count: int) -> None:
        if sum(self.items.values()) + count > MAX_ITEMS:
            raise ValueError(f"the stock holds at most {MAX_ITEMS} items")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name: str, count: int) -> None:
        # TODO: refuse to remove more than is held
        self.items[name] = self.items.get(name, 0) - count

    def held(self, name: str) -> int:
        return self.items.get(name, 0)
