#!/usr/bin/env python3
"""Which failed boots vmtest boots once more (`host.emulation_crash`), on made-up consoles:
a guest stopped by the emulator is retried, a check that failed never is (run by `make test`;
no guest needed)."""
import argparse
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host  # noqa: E402

RCU = "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:"
LOCKUP = "watchdog: BUG: soft lockup - CPU#1 stuck for 26s! [python3:212]"


class Console:
    """A Bed's console and verdict, without QEMU."""

    def __init__(self, text, went_silent=True, failures=(), checks_failed=0):
        fd, self.console = tempfile.mkstemp(prefix="vmtest-console-")
        os.write(fd, text.encode())
        os.close(fd)
        self.went_silent = went_silent
        self.failures = list(failures)
        self.checks_failed = checks_failed
        self.args = argparse.Namespace()

    def __del__(self):
        os.unlink(self.console)


class Retry(unittest.TestCase):
    def test_a_kernel_stall_then_silence_is_booted_again(self):
        for line in (RCU, LOCKUP, "INFO: task python3:88 blocked for more than 122 seconds."):
            bed = Console(f"RESULT PASS topology\nREADY irq-core 2000 64\n{line}\n")
            why = host.emulation_crash(bed)
            self.assertIsNotNone(why, line)
            self.assertIn(line, why)

    def test_a_stall_the_guest_recovered_from_is_not(self):
        # The boot ended for another reason (a check failed, or DONE came): no retry.
        bed = Console(f"{RCU}\nRESULT PASS a\n", went_silent=False)
        self.assertIsNone(host.emulation_crash(bed))

    def test_a_failed_check_before_the_stall_is_a_failure(self):
        bed = Console(f"RESULT FAIL irq-core: every frame reached the sink\n{RCU}\n", checks_failed=1)
        self.assertIsNone(host.emulation_crash(bed))

    def test_a_failure_on_the_host_is_a_failure(self):
        bed = Console(f"{RCU}\n", failures=["eBPF RSS: not loaded"])
        self.assertIsNone(host.emulation_crash(bed))

    def test_silence_with_no_check_failed_is_booted_again_naming_where_it_stopped(self):
        bed = Console("RESULT PASS topology\nREADY irq-core 2000 64\n")
        self.assertIn("READY irq-core", host.emulation_crash(bed))

    def test_silence_after_a_failed_check_is_a_failure(self):
        bed = Console("RESULT FAIL irq-core: starts\nREADY spread 2000 64\n", checks_failed=1)
        self.assertIsNone(host.emulation_crash(bed))

    def test_a_timer_that_stopped_is_booted_again(self):
        bed = Console(f"RESULT PASS a\nrcu: {host.TIMER_STALL} for 3000 jiffies\n", went_silent=False)
        self.assertIn(host.TIMER_STALL, host.emulation_crash(bed))


if __name__ == "__main__":
    unittest.main()
