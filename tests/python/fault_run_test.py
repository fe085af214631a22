"""tools/python/examples/cartpole_dqn/fault_run.py, reduced (issue 28, "Must show"):
the elastic CartPole (three DQN replicas, on_learner_failure: shrink) under a coordinator
stepping GetData + Learn: one replica SIGSTOPped, a second SIGSTOPped while the first is
SIGCONTed, the second SIGCONTed, then one SIGKILLed. A hung replica costs about a second
(the collective's bound, then straggler.late_after), not the keepalive's 15 s; a killed
one a step. The bounds are loose (a loaded 2-core machine) yet fail with late_after:
off (no Learn at all while a replica is stopped)."""

import json
import os
import subprocess
import sys
import unittest

import testutil

DRIVER = "tools/python/examples/cartpole_dqn/fault_run.py"


class FaultRunTest(unittest.TestCase):
    def test_a_hung_replica_costs_a_second_and_a_killed_one_a_step(self):
        directory = testutil.temp_dir()
        report_path = os.path.join(directory, "report.json")
        run = subprocess.run(
            [sys.executable, DRIVER, "--schedule", "stop@0,stop@5,cont@12,kill@17",
             "--duration", "27", "--warmup", "0", "--aggregatord", "daemon/aggregatord",
             "--dir", directory, "--json", report_path],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
        sys.stderr.write(run.stdout)
        self.assertEqual(run.returncode, 0, run.stdout[-2000:])
        with open(report_path) as f:
            report = json.load(f)
        rows = report["rows"]
        self.assertEqual([r["kind"] for r in rows], ["stop", "stop", "cont", "kill"], rows)
        self.assertTrue(all(f["sent"] for f in report["faults"]), report["faults"])
        first, second, cont, kill = rows
        # A hung replica: ~0.3-1.5 s (late_after, or the collective's bound then
        # late_after); with late answers off no Learn at all while it is stopped.
        self.assertIsNotNone(first["next_learn"], f"no Learn within 5 s of {first}")
        self.assertLess(first["next_learn"], 5.0, first)
        # The second hangs while the first is continued. With one replica out and one
        # hung, steps wait for the continued one to rejoin (min_learners 2): the next
        # Learn is its rejoin (1.6-4 s with the replay inside GetData, waiting for the out
        # learner's retry delay; 1.0 s with rejoin off the call path).
        self.assertEqual(second.get("continued"), "dqn-0", second)
        self.assertIsNotNone(second["rejoin_learn"], f"dqn-0 not back within 7 s: {second}")
        # The second, continued while none hangs, is back.
        self.assertEqual(cont.get("continued"), "dqn-1", cont)
        self.assertIsNotNone(cont["rejoin_learn"], f"dqn-1 not back within 5 s: {cont}")
        self.assertIsNotNone(kill["next_learn"], f"no Learn after {kill}")
        self.assertLess(kill["next_learn"], 2.0, kill)
        # Restarted (Python and torch start-up), the killed replica is back.
        self.assertIsNotNone(kill["whole"], f"not three again within 10 s: {kill}")


if __name__ == "__main__":
    sys.exit(testutil.main())
