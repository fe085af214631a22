"""serve() as a learner process: a learner's SystemExit is answered and then ends the
process with its code; a learn that never returns does not keep the process past
serve()'s grace."""

import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc

import testutil
from learner_aggregator import AggregatorClient, AggregatorError, Sample

# argv: ADDRESS GRACE. learn() raises SystemExit(meta "exit") or blocks forever
# (meta "hang", after printing "learning").
LEARNER = """
import sys, threading
from learner_aggregator import serve
class Learner:
    def get_resource(self): return {"gpus": 0}
    def learn(self, samples):
        meta = samples[0].meta
        if "exit" in meta:
            raise SystemExit(int(meta["exit"]))
        print("learning", flush=True)
        threading.Event().wait()  # stuck for good
try:
    serve(Learner(), sys.argv[1], grace=float(sys.argv[2]))
finally:
    print("serve returned", flush=True)
"""


class ServeProcessTest(unittest.TestCase):
    def start(self, grace: float = 1.0) -> "tuple[subprocess.Popen, int]":
        process = subprocess.Popen([sys.executable, "-c", LEARNER, "127.0.0.1:0", str(grace)],
                                   stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (process.poll() is None and process.kill(), process.wait(),
                                 process.stdout.close()))
        line = process.stdout.readline()  # "learner listening on 127.0.0.1:PORT"
        self.assertIn("learner listening on", line)
        return process, int(line.rsplit(":", 1)[1])

    def test_system_exit_is_answered_then_the_process_exits_with_its_code(self):
        process, port = self.start()
        with AggregatorClient(f"127.0.0.1:{port}", timeout=testutil.LONG_WAIT) as client:
            with self.assertRaises(AggregatorError) as caught:
                client.learn([Sample(b"", {"exit": 3})])
        self.assertEqual(caught.exception.code, grpc.StatusCode.INTERNAL)
        self.assertEqual(caught.exception.details, "SystemExit: 3")
        self.assertEqual(process.wait(testutil.LONG_WAIT), 3)
        self.assertEqual(process.stdout.read(), "serve returned\n")  # from the main thread

    def test_a_stuck_learn_does_not_outlive_the_grace(self):
        grace = 1.0
        process, port = self.start(grace)
        client = AggregatorClient(f"127.0.0.1:{port}", timeout=testutil.LONG_WAIT)
        self.addCleanup(client.close)
        results: list = []
        caller = threading.Thread(target=lambda: results.append(
            _outcome(client.learn, [Sample(b"", {"hang": 1})])), daemon=True)
        caller.start()
        self.assertEqual(process.stdout.readline(), "learning\n")
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(testutil.LONG_WAIT)  # TimeoutExpired without the fix
        took = time.monotonic() - started
        self.assertEqual(code, 0)
        self.assertEqual(process.stdout.read(), "serve returned\n")
        self.assertLess(took, grace + 5, "exited, but long after its grace")
        caller.join(testutil.LONG_WAIT)
        self.assertIsInstance(results[0], AggregatorError)  # the call was cut, not left open
        print(f"exited {took:.2f}s after SIGTERM with a learn stuck (grace {grace}s)")


def _outcome(function, *args):
    try:
        return function(*args)
    except AggregatorError as e:
        return e


if __name__ == "__main__":
    sys.exit(testutil.main())
