import unittest

from inventory.stock import MAX_ITEMS, Stock


class StockTests(unittest.TestCase):
    def test_add_counts_items(self) -> None:
        stock = Stock()
        stock.add("apple", 3)
        stock.add("apple", 2)
        self.assertEqual(stock.held("apple"), 5)

    def test_the_stock_is_capped(self) -> None:
        with self.assertRaises(ValueError):
            Stock().add("pear", MAX_ITEMS + 1)

    def test_removing_more_than_is_held_is_refused(self) -> None:
        stock = Stock()
        stock.add("plum", 2)
        with self.assertRaises(ValueError):
            stock.remove("plum", 3)
        self.assertEqual(stock.held("plum"), 2)
