"""The CartPole DQN example through aggregatord, short: config/examples/cartpole_dqn.yaml
(on free ports) starts two DQN replicas as workers, the coordinator trains a few hundred
steps through the daemon, and the run must show the loss falling, priorities that line
up with the samples sent, and bit-identical replica weights."""

import json
import os
import subprocess
import sys
import unittest

import testutil

CONFIG = "config/examples/cartpole_dqn.yaml"
COORDINATOR = "tools/python/examples/cartpole_dqn/coordinator.py"


def test_config() -> str:
    """The example config on free ports: an ephemeral listen port, two learner ports
    and the gloo store's port."""
    base = testutil.free_port_run(3)
    return testutil.example_config(CONFIG, [
        (r'listen: "127\.0\.0\.1:22280"', 'listen: "127.0.0.1:0"'),
        (r"port_base: 22320", f"port_base: {base}"),
        (r'--dist-port, "22330"', f'--dist-port, "{base + 2}"'),
    ])


class CartpoleDqnTest(unittest.TestCase):
    def test_a_replayed_start_task_keeps_the_replicas_state(self):
        # The aggregator replays the open task to a replica that reconnects (a SIGSTOP
        # past the keepalive): it must not start over (fault_run.py --train lost a run's
        # 4,600 steps when the replica with them was killed meanwhile).
        sys.path.insert(0, os.path.dirname(COORDINATOR))
        from dqn import DQNLearner, encode_transition, state_sha256
        from learner_aggregator import Sample
        info = {"task_id": "t", "seed": 1, "checkpoint": os.path.join(testutil.temp_dir(), "w.pt")}
        learner = DQNLearner(batch_size=4)
        learner.start_task(dict(info))
        samples = [Sample(encode_transition([0.1, 0, 0, 0], i % 2, 1.0, [0.2, 0, 0, 0], False),
                          {"replay_unique_id": i, "weight": 1.0}) for i in range(4)]
        for _ in range(3):
            trained = learner.learn(samples)["weights_sha256"]
        message = learner.start_task(dict(info))
        self.assertIn("already on this task, at step 3", message)
        self.assertEqual(learner.step, 3)
        self.assertEqual(state_sha256(learner.q), trained)
        self.assertEqual(learner.learn(samples)["learner_step"], 4)
        # Another task (a new run: its own checkpoint) starts over.
        learner.start_task(dict(info, checkpoint=info["checkpoint"] + ".2"))
        self.assertEqual(learner.step, 0)

    def test_short_run_through_the_aggregator(self):
        daemon = testutil.Daemon(test_config())
        self.addCleanup(daemon.stop)
        directory = daemon.directory
        summary_path = os.path.join(directory, "summary.json")
        plot_path = os.path.join(directory, "returns.png")
        run = subprocess.run(
            [sys.executable, COORDINATOR, "--address", daemon.address, "--seed", "1",
             "--max-env-steps", "700", "--learning-starts", "300", "--target-update", "100",
             "--summary", summary_path, "--plot", plot_path, "--no-progress"],
            capture_output=True, text=True, timeout=110)
        sys.stderr.write(run.stdout + run.stderr)
        self.assertEqual(run.returncode, 0)
        with open(summary_path) as f:
            summary = json.load(f)

        self.assertEqual(summary["env_steps"], 700)
        self.assertEqual(summary["train_steps"], 401)
        self.assertTrue(summary["ids_aligned"])  # every step, in the order sent
        self.assertTrue(summary["weights_identical_every_step"])
        hashes = summary["final_weights_sha256"]
        self.assertEqual(len(hashes), 2)  # one per replica, merged in order
        self.assertEqual(hashes[0], hashes[1])
        self.assertLess(summary["loss_last_50"], 0.5 * summary["loss_first_50"])
        for replica in (0, 1):  # each replica logs its own hash when the task closes
            line = daemon.wait_for_line(f"[dqn-{replica}] replica {replica} closed")
            self.assertIn(f"weights sha256 {hashes[0]}", line)
        with open(plot_path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertEqual(daemon.stop(), 0)


if __name__ == "__main__":
    sys.exit(testutil.main())
