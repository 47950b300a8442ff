import unittest

import fieldservice


class PackageTest(unittest.TestCase):
    def test_imports(self):
        self.assertTrue(fieldservice.__doc__)
