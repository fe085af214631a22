"""tools/python/examples/cartpole_dqn/fault_run.py, reduced (issue 28, "Must show"):
the elastic CartPole (three DQN replicas, on_learner_failure: shrink) under a coordinator
stepping GetData + Learn: one replica SIGSTOPped, SIGCONTed 6 s later, then one
SIGKILLed. A hung replica costs about a second (the collective's bound, then
straggler.late_after), not the keepalive's 15 s; a killed one a step. The bounds are
loose (a loaded 2-core machine) yet fail with late_after: off (no Learn at all while a
replica is stopped). A replica continued while another hangs is measured by the long
run (fault_run.py --stop-every 20): under the keepalive (15 s) it stays connected and
comes back at its next retry as an out learner (1 s, doubling), a race with the SIGCONT
too wide for CI."""

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
            [sys.executable, DRIVER, "--schedule", "stop@0,cont@6,kill@16",
             "--duration", "26", "--warmup", "0", "--aggregatord", "daemon/aggregatord",
             "--dir", directory, "--json", report_path],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
        sys.stderr.write(run.stdout)
        self.assertEqual(run.returncode, 0, run.stdout[-2000:])
        with open(report_path) as f:
            report = json.load(f)
        rows = report["rows"]
        self.assertEqual([r["kind"] for r in rows], ["stop", "cont", "kill"], rows)
        self.assertTrue(all(f["sent"] for f in report["faults"]), report["faults"])
        stop, cont, kill = rows
        # A hung replica: ~0.5-1.7 s (late_after, or the collective's bound then
        # late_after); with late answers off no Learn at all while it is stopped.
        self.assertIsNotNone(stop["next_learn"], f"no Learn within 6 s of {stop}")
        self.assertLess(stop["next_learn"], 5.0, stop)
        # Continued, it is back (at its next retry: 3.5 s at most here, measured 0.1-1.6 s).
        self.assertEqual(cont.get("continued"), "dqn-0", cont)
        self.assertIsNotNone(cont["rejoin_learn"], f"dqn-0 not back within 10 s: {cont}")
        self.assertIsNotNone(kill["next_learn"], f"no Learn after {kill}")
        self.assertLess(kill["next_learn"], 2.0, kill)
        # Restarted (Python and torch start-up), the killed replica is back.
        self.assertIsNotNone(kill["whole"], f"not three again within 10 s: {kill}")

if __name__ == "__main__":
    sys.exit(testutil.main())
