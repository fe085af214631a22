"""aggregatord with two Python learners (tools/python/examples/example_learner.py) and
two C++ example learners as workers, driven by AggregatorClient: the merged priorities
and replay ids line up with the samples sent; a Python learner that raises in learn
fails the call naming that learner and the exception; a SIGKILLed Python learner is
restarted by the daemon and rejoins; a batch over the client's stream_threshold goes by
LearnStream and lines up the same."""

import os
import re
import signal
import sys
import unittest
import urllib.request

import testutil
from learner_aggregator import AggregatorClient, AggregatorError, Sample

sys.path.insert(0, "tools/python/examples")
from example_learner import sample_priority  # noqa: E402

PY_BATCH, CC_BATCH = 3, 5
LEARNERS = ["py-0", "py-1", "cc-0", "cc-1"]
SLICES = [PY_BATCH, PY_BATCH, CC_BATCH, CC_BATCH]
TOTAL = sum(SLICES)


def config(port_base: int) -> str:
    return f"""
listen: "127.0.0.1:0"
min_learners: 4
metrics: {{listen: "127.0.0.1:0"}}
admin: {{listen: "127.0.0.1:0"}}
connect:
  timeout: 60s
  backoff: {{initial: 50ms, max: 500ms}}
call_timeout: 20s
workers:
  - name: py
    command: [tools/python/run, tools/python/examples/example_learner.py,
              --listen, "127.0.0.1:{{port}}", --batch-size, "{PY_BATCH}"]
    replicas: 2
    port_base: {port_base}
    learner: true
    backoff: {{initial: 100ms}}
    min_uptime: 100ms
    stop_timeout: 5s
  - name: cc
    command: [tools/examples/example_learner, --listen, "127.0.0.1:{{port}}",
              --batch-size, "{CC_BATCH}"]
    replicas: 2
    port_base: {port_base + 2}
    learner: true
"""


def make_samples(step: int):
    return [Sample(f"step {step} sample {i} ".encode() * (i + 1),
                   {"replay_unique_id": f"s{step}-{i}"}) for i in range(TOTAL)]


class MixedClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = testutil.Daemon(config(testutil.free_port_run(4)))
        cls.client = AggregatorClient(cls.daemon.address, timeout=testutil.LONG_WAIT,
                                      admin_address=cls.daemon.admin_address)
        testutil.wait_until(lambda: cls.all_ready(cls.client.status()), "4 ready learners")
        cls.client.start_task({"task_id": "mixed", "buffer_id": "buf"})

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.daemon.stop()
        assert code == 0, f"aggregatord exited with {code}"

    @staticmethod
    def all_ready(status):
        learners = {l["id"]: l["state"] for l in status["learners"]}
        return learners == {name: "LEARNER_STATE_READY" for name in LEARNERS}

    def train_step(self, step: int, client=None):
        client = client or self.client
        demand = client.get_data()
        self.assertEqual(demand["batch_size"], TOTAL)
        self.assertEqual(demand["membership"]["members"], LEARNERS)
        samples = make_samples(step)
        return samples, client.learn(samples, demand["plan_id"])

    def check_lines_up(self, step: int, client=None):
        samples, reply = self.train_step(step, client)
        info = reply["info"]
        self.assertEqual(info["priority_info"]["replay_unique_id"],
                         [s.meta["replay_unique_id"] for s in samples])
        self.assertEqual(info["priority_info"]["priority"],
                         [sample_priority(s.data) for s in samples])
        self.assertEqual(info["received"], SLICES)  # a scalar per learner, in order
        # The Python learners were told who trains this step; the C++ ones say nothing.
        self.assertEqual(info["members_seen"], [4, 4, None, None])
        self.assertEqual(info["task_id"], "mixed")
        self.assertEqual(reply["task_id"], "mixed")

    def test_1_priorities_and_ids_line_up(self):
        self.assertEqual(self.client.resource(), {"gpus": 4, "learners": 4, "learn_stream": True})
        for step in range(3):
            self.check_lines_up(step)

    def test_2_python_exception_names_the_learner(self):
        demand = self.client.get_data()
        samples = make_samples(100)
        samples[PY_BATCH + 1].meta["raise"] = "replay shard 7 is corrupt"  # py-1's slice
        with self.assertRaises(AggregatorError) as caught:
            self.client.learn(samples, demand["plan_id"])
        details = caught.exception.details
        self.assertIn("py-1", details)
        self.assertIn("RuntimeError: replay shard 7 is corrupt", details)
        self.assertNotIn("py-0", details)
        self.check_lines_up(101)  # everyone still serves

    def test_3_killed_python_learner_is_restarted_and_rejoins(self):
        def py0(status):
            return next(w for w in status["workers"] if (w["name"], w["index"]) == ("py", 0))

        before = py0(self.client.status())
        os.kill(before["pid"], signal.SIGKILL)

        def rejoined():
            status = self.client.status()
            worker = py0(status)
            return (worker["restarts"] > before["restarts"] and worker["pid"] != before["pid"]
                    and worker["state"] in ("WORKER_STATE_STARTING", "WORKER_STATE_RUNNING")
                    and self.all_ready(status))

        testutil.wait_until(rejoined, "py-0 restarted and ready again", timeout=60)
        # The restarted learner has no task: start it again, as a coordinator would.
        self.client.start_task({"task_id": "mixed", "buffer_id": "buf"})
        self.check_lines_up(200)

    def served(self, rpc: str) -> float:
        """aggregator_requests_total{rpc, code="OK"} from the daemon's metrics."""
        line = self.daemon.wait_for_line("metrics on http://")
        url = line.split("metrics on ", 1)[1].split()[0]
        with urllib.request.urlopen(url, timeout=testutil.LONG_WAIT) as response:
            text = response.read().decode()
        for labels, value in re.findall(r'^aggregator_requests_total\{([^}]*)\} (\S+)$', text,
                                        re.MULTILINE):
            if f'rpc="{rpc}"' in labels and 'code="OK"' in labels:
                return float(value)
        return 0.0

    def test_4_a_batch_over_the_threshold_streams(self):
        streaming = AggregatorClient(self.daemon.address, timeout=testutil.LONG_WAIT,
                                     stream_threshold=100, stream_message_bytes=150)
        self.addCleanup(streaming.close)
        before = self.served("LearnStream")
        for step in range(300, 302):
            self.check_lines_up(step, streaming)
        self.assertEqual(self.served("LearnStream"), before + 2)


if __name__ == "__main__":
    sys.exit(testutil.main())
