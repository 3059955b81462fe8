#!/usr/bin/env python3
"""Which failed boots vmtest boots once more (`host.emulation_crash`), on made-up consoles:
a guest the emulator stopped is retried; a check that failed, a failure on the host's side or
a task stuck in the guest kernel never is (run by `make test`; no guest needed)."""
import argparse
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host  # noqa: E402

RCU = "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:"
LOCKUP = "watchdog: BUG: soft lockup - CPU#1 stuck for 26s! [python3:212]"
HUNG = "INFO: task python3:88 blocked for more than 122 seconds."


class Console:
    """A Bed's console and verdict, without QEMU. A failed check on the console is a
    failed check on the host too, as `serve` records it."""

    def __init__(self, text, went_silent=True, host_failures=()):
        fd, self.console = tempfile.mkstemp(prefix="vmtest-console-")
        os.write(fd, text.encode())
        os.close(fd)
        self.went_silent = went_silent
        fails = [line[len("RESULT FAIL "):] for line in text.splitlines() if line.startswith("RESULT FAIL ")]
        self.failures = fails + list(host_failures)
        self.checks_failed = len(fails)
        self.args = argparse.Namespace()

    def __del__(self):
        os.unlink(self.console)


class Retry(unittest.TestCase):
    def test_an_rcu_stall_then_silence_is_booted_again_naming_the_stall(self):
        why = host.emulation_crash(Console(f"RESULT PASS topology\nREADY irq-core 2000 64\n{RCU}\n"))
        self.assertIn("reported an RCU stall", why)
        self.assertIn(RCU, why)

    def test_a_stuck_task_or_cpu_is_a_failure(self):
        for line in (LOCKUP, HUNG):
            bed = Console(f"RESULT PASS topology\nREADY irq-core 2000 64\n{line}\n")
            self.assertIsNone(host.emulation_crash(bed), line)

    def test_a_stall_the_guest_recovered_from_is_not_booted_again(self):
        # The boot ended for another reason (DONE came, or the guest kept talking).
        self.assertIsNone(host.emulation_crash(Console(f"{RCU}\nRESULT PASS a\n", went_silent=False)))

    def test_a_failed_check_is_a_failure(self):
        bed = Console(f"RESULT FAIL irq-core: every frame reached the sink\n{RCU}\n")
        self.assertIsNone(host.emulation_crash(bed))
        bed = Console("RESULT FAIL irq-core: starts\nREADY spread 2000 64\n")
        self.assertIsNone(host.emulation_crash(bed))

    def test_a_failure_on_the_host_is_a_failure(self):
        self.assertIsNone(host.emulation_crash(Console(f"{RCU}\n", host_failures=["eBPF RSS: not loaded"])))

    def test_silence_with_no_check_failed_is_booted_again_naming_where_it_stopped(self):
        why = host.emulation_crash(Console("RESULT PASS topology\nREADY irq-core 2000 64\n"))
        self.assertIn("went silent before any check failed", why)
        self.assertIn("READY irq-core", why)

    def test_a_timer_that_stopped_is_booted_again(self):
        bed = Console(f"RESULT PASS a\nrcu: {host.TIMER_STALL} for 3000 jiffies\n", went_silent=False)
        self.assertIn(host.TIMER_STALL, host.emulation_crash(bed))


class Stall(unittest.TestCase):
    def test_only_a_report_after_the_guest_s_last_line_counts(self):
        bed = Console(f"{RCU}\nRESULT PASS a\n")
        self.assertEqual(host.kernel_stall(bed), RCU)
        self.assertIsNone(host.kernel_stall(bed, since=len(f"{RCU}\n")))
        self.assertIsNone(host.kernel_stall(bed, since=host.console_len(bed)))

    def test_a_stuck_task_is_no_rcu_stall(self):
        self.assertIsNone(host.kernel_stall(Console(f"{HUNG}\n{LOCKUP}\n")))


if __name__ == "__main__":
    unittest.main()
