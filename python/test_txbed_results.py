"""Checks txbed_results.py against real txbed output (run by cli/tests/python_cli.rs):
    python3 python/test_txbed_results.py RUN_DIR SWEEP_DIR EXPECTED_ROWS"""

import importlib.util
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import txbed_results as tx  # noqa: E402

RUN, SWEEP, ROWS = sys.argv[1], sys.argv[2], int(sys.argv[3])


class Load(unittest.TestCase):
    def test_sweep_rows_are_typed(self):
        rows = tx.load(SWEEP)
        self.assertEqual(len(rows), ROWS)
        for r in rows:
            self.assertIsInstance(r["seed"], int)
            self.assertIsInstance(r["throughput_tps"], (int, float))
            self.assertGreater(r["throughput_tps"], 0)
            self.assertIsInstance(r["digest"], str)
        self.assertEqual(rows, tx.load(os.path.join(SWEEP, "results.csv")))

    def test_summary_means_match_the_rows(self):
        rows = tx.load(SWEEP)
        summary = tx.load_csv(os.path.join(SWEEP, "summary.csv"))
        self.assertTrue(summary)
        for s in summary:
            keys = [k for k in s if k in rows[0] and k not in ("runs",) and not k.endswith(("_mean", "_ci95"))]
            mine = [r for r in rows if all(r[k] == s[k] for k in keys)]
            mean = sum(r["throughput_tps"] for r in mine) / len(mine)
            self.assertTrue(math.isclose(mean, s["throughput_tps_mean"], rel_tol=1e-6), (mean, s))

    def test_run_report_and_history(self):
        report = tx.load(RUN)
        self.assertGreater(report["committed"], 0)
        self.assertEqual(len(report["digest"]), 16)
        history = tx.load(os.path.join(RUN, "history.jsonl"))
        self.assertGreater(len(history), 0)

    # CI sets TXBED_REQUIRE_PANDAS, so there a missing pandas fails instead of skipping.
    @unittest.skipUnless(
        importlib.util.find_spec("pandas") or os.environ.get("TXBED_REQUIRE_PANDAS"), "pandas not installed"
    )
    def test_dataframes(self):
        self.assertEqual(len(tx.load(SWEEP, dataframe=True)), ROWS)
        self.assertIn("digest", tx.load(RUN, dataframe=True).columns)

    def test_bad_paths_are_clear(self):
        with self.assertRaises(FileNotFoundError):
            tx.load(os.path.dirname(os.path.abspath(__file__)))
        with self.assertRaises(ValueError):
            tx.load(__file__)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
