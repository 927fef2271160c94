import unittest

from inventory.prices import total


class PriceTests(unittest.TestCase):
    def test_total_counts_each_item(self) -> None:
        self.assertAlmostEqual(total({"apple": 3, "pear": 2}), 2.3)

    def test_an_empty_order_costs_nothing(self) -> None:
        self.assertEqual(total({}), 0)
