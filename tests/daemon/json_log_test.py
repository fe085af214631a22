"""log.format: json on a live aggregatord: every line it writes on stderr is one
JSON object with ts, level and msg, a worker's output line carries the worker's
name and replica, a learner failing a call gives a line with its learner, address
and code fields, and text stays the default."""

import json
import subprocess
import sys
import unittest

import testutil

CONFIG = """
listen: "127.0.0.1:0"
admin: {{listen: ""}}
metrics: {{listen: ""}}
min_learners: 0
workers:
  - name: talker
    command: [/bin/sh, -c, "echo 'hello \\"quoted\\" from the worker'; exec sleep 600"]
    restart: never
log:
  format: {format}
"""


class JsonLogTest(unittest.TestCase):

    def test_json_lines_parse_and_carry_the_worker(self):
        daemon = testutil.Daemon(CONFIG.format(format="json"))
        try:
            line = daemon.wait_for_line("[talker-0] hello")
        finally:
            self.assertEqual(daemon.stop(), 0)
        worker = json.loads(line)
        self.assertEqual(worker["worker"], "talker")
        self.assertEqual(worker["replica"], "0")
        self.assertEqual(worker["msg"], '[talker-0] hello "quoted" from the worker')
        lines = [l for l in daemon.lines if l is not None]
        self.assertGreater(len(lines), 3)
        for text in lines:
            record = json.loads(text)  # raises on a line that is not JSON
            self.assertEqual(set(record) >= {"ts", "level", "msg"}, True, text)
            self.assertRegex(record["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        started = [json.loads(l) for l in lines if "talker-0 started (pid" in l]
        self.assertEqual(started[0]["worker"], "talker")
        self.assertRegex(started[0]["pid"], r"^[0-9]+$")
        print("json lines:", len(lines), flush=True)
        for text in lines[:3] + [line]:
            print("  ", text, flush=True)

    def test_a_failing_learner_has_its_fields(self):
        # Issue 29: lines about one learner carry learner, address and code.
        learner = subprocess.Popen(
            ["tools/examples/example_learner", "--listen", "127.0.0.1:0",
             "--fail-on", "StartTask"], stdout=subprocess.PIPE, text=True)
        self.addCleanup(learner.wait, testutil.LONG_WAIT)
        self.addCleanup(learner.kill)
        address = learner.stdout.readline().split()[-1]  # "... listening on ADDR"
        daemon = testutil.Daemon(f"""
listen: "127.0.0.1:0"
admin: {{listen: ""}}
metrics: {{listen: ""}}
learners:
  - {{id: flaky, address: "{address}"}}
min_learners: 1
log:
  format: json
""")
        try:
            ready = daemon.wait_for_line("ready after")  # the pool's state change
            daemon.wait_for_line("serving: 1 of 1")
            ctl = subprocess.run(["tools/cli/aggregatorctl", "--target", daemon.address,
                                  "--timeout", str(testutil.LONG_WAIT), "start"],
                                 capture_output=True, text=True,
                                 timeout=testutil.LONG_WAIT)
            self.assertEqual(ctl.returncode, 1, ctl.stderr)
            line = daemon.wait_for_line("StartTask failed on 1 of 1")
        finally:
            self.assertEqual(daemon.stop(), 0)
        record = json.loads(line)
        self.assertEqual(record["level"], "warning")
        self.assertEqual((record.get("learner"), record.get("address"), record.get("code")),
                         ("flaky", address, "INTERNAL"), line)
        state = json.loads(ready)
        self.assertEqual((state.get("learner"), state.get("address")), ("flaky", address),
                         ready)
        print("failure line:", line, flush=True)
        print("state line:", ready, flush=True)

    def test_text_is_the_default(self):
        daemon = testutil.Daemon(CONFIG.format(format="text").replace("log:\n  format: text\n", ""))
        try:
            line = daemon.wait_for_line("[talker-0] hello")
        finally:
            self.assertEqual(daemon.stop(), 0)
        self.assertRegex(line, r"^\d{4}-\d\d-\d\dT[\d:.]+ info \[talker-0\] hello")


if __name__ == "__main__":
    sys.exit(testutil.main())
