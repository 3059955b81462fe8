#!/usr/bin/env python3
"""`make rebalance-compare`'s goal checks on made-up runs: each goal fails when its figure is
missing or says nothing (run by `make test`; no guest needed)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import guest  # noqa: E402
import host  # noqa: E402


def timeline(busy, t0=0.0, t1=30.0):
    """Samples every 0.3 s over [t0, t1) with the same busy shares, 64 buckets a poller."""
    out, t = [], t0
    while t < t1:
        out.append((round(t, 2), list(busy), 0, [64, 64, 64, 64]))
        t += 0.3
    return out


def run(name, drops=0, moves=3, night=(40.0, 60.0), busy=(0.5, 0.5, 0.5, 0.5), offered=100000):
    tl = timeline(busy)
    return {
        "name": name, "drops": drops, "moves": moves, "changes": [0, 10, 20], "offered": offered,
        "timeline": tl, "imbalance_after_2s": [guest.window_imbalance(tl, 2, 10),
                                               guest.window_imbalance(tl, 12, 20)],
        "buckets": [256, 0, 0, 0], "night_cpu_ms": night[0], "night_all_cpu_ms": night[1],
        "night_s": 10.0,
    }


def goals(st, rebalanced, sc=None):
    for rb in rebalanced:
        rb["goal_figures"] = guest.rebalancer_figures(rb)
    return {text.split(" (")[0]: ok for text, ok, _ in
            guest.goal_checks(st, sc or rebalanced[0], rebalanced, [])}


def goal(checks, start):
    return next(ok for text, ok in checks.items() if text.startswith(start))


class Goals(unittest.TestCase):
    def test_an_even_run_meets_the_goals_it_has_figures_for(self):
        g = goals(run("static RSS", drops=1000), [run("rebalancer", drops=0)])
        self.assertTrue(goal(g, "drops <= 1%"))
        self.assertTrue(goal(g, "and it holds"))
        self.assertTrue(goal(g, "CPU at night"))
        self.assertTrue(goal(g, "every rebalancer run's moves"))

    def test_drops_none_against_none_says_nothing_and_fails(self):
        g = goals(run("static RSS", drops=0), [run("rebalancer", drops=0)])
        self.assertFalse(goal(g, "drops <= 1%"))

    def test_static_rss_losing_under_one_percent_is_not_measured_and_fails(self):
        # 999 of 100,000 offered: the load did not overload static RSS; the rebalancer's
        # 0 says nothing about the goal.
        g = goals(run("static RSS", drops=999), [run("rebalancer", drops=0)])
        self.assertFalse(goal(g, "drops <= 1%"))
        g = goals(run("static RSS", drops=1000, offered=None), [run("rebalancer", drops=0)])
        self.assertFalse(goal(g, "drops <= 1%"))

    def test_a_missing_drop_count_fails(self):
        g = goals(run("static RSS", drops=1000), [run("rebalancer", drops=None)])
        self.assertFalse(goal(g, "drops <= 1%"))

    def test_an_empty_window_is_no_figure_and_fails(self):
        self.assertIsNone(guest.window_imbalance(timeline((0.5,) * 4, 0, 5), 10, 20))
        rb = run("rebalancer")
        rb["timeline"] = timeline((0.5,) * 4, 0, 5)
        rb["imbalance_after_2s"] = [None, None]
        g = goals(run("static RSS", drops=1000), [rb])
        self.assertFalse(goal(g, "and it holds"))

    def test_a_night_without_a_measurement_fails(self):
        g = goals(run("static RSS", drops=1000, night=(None, None)), [run("rebalancer")])
        self.assertFalse(goal(g, "CPU at night"))

    def test_a_missing_moves_metric_fails(self):
        g = goals(run("static RSS", drops=1000), [run("rebalancer", moves=None)])
        self.assertFalse(goal(g, "every rebalancer run's moves"))

    def test_the_even_placement_is_reported_beside_the_drops_goal_and_its_missing_count_fails(self):
        st, rb = run("static RSS", drops=1000), [run("rebalancer", drops=30)]
        rb[0]["goal_figures"] = guest.rebalancer_figures(rb[0])
        checks = guest.goal_checks(st, rb[0], rb, [], run(guest.EVEN, drops=20))
        drops = next(d for text, _, d in checks if text.startswith("drops <= 1%"))
        self.assertIn("lost 20 of 100000, 2.0% of static RSS's loss", drops)
        self.assertIn("median less the even placement's: +10", drops)
        even = [ok for text, ok, _ in checks if text.startswith("the even placement measured")]
        self.assertEqual(even, [True])
        checks = guest.goal_checks(st, rb[0], rb, [], run(guest.EVEN, drops=None))
        self.assertEqual([ok for text, ok, _ in checks if text.startswith("the even placement measured")], [False])
        # Without its run, no line for it.
        checks = guest.goal_checks(st, rb[0], rb, [])
        self.assertFalse(any(text.startswith("the even placement") for text, _, _ in checks))

    def test_a_spread_schedule_puts_one_heavy_flow_on_each_queue_in_each_phase(self):
        key = bytes(range(40))
        s = host.Schedule(None, key, 10, 1000, 1000, spread=True)
        for buckets in s.buckets:
            self.assertEqual(sorted(b % 4 for b in buckets), [0, 1, 2, 3])
        self.assertFalse(set(s.plan[0]) & set(s.plan[1]))
        skewed = host.Schedule(None, key, 10, 1000, 1000)
        self.assertEqual([b % 4 for b in skewed.buckets[0]], [0] * 4)

    def test_a_comparison_without_tunes_row_fails(self):
        self.assertFalse(host.compare_passed(True, None))
        self.assertTrue(host.compare_passed(True, "spread"))
        self.assertFalse(host.compare_passed(False, "spread"))


if __name__ == "__main__":
    unittest.main()
