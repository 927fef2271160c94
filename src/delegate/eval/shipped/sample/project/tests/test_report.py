import unittest

from inventory import report
from inventory.stock import Stock


class ReportTests(unittest.TestCase):
    def test_describe_lists_each_kind_with_its_value(self) -> None:
        stock = Stock()
        stock.add("apple", 10)
        self.assertEqual(report.describe(stock), "apple: 10 (4.00)")
