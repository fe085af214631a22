"""Issue 27: AggregatorError.failed_learners. aggregatord over two Python learners, one
refusing StartTask: the error names it in its text as before, and failed_learners,
read from the standard gRPC error details, gives its id, address, code and message."""

import sys
import unittest

import grpc

import testutil
from learner_aggregator import (AggregatorClient, AggregatorError, LearnerError,
                                LearnerServer)


class Learner:
    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse

    def get_resource(self):
        return {"gpus": 0, "learners": 1}

    def start_task(self, task_info):
        if self.refuse:
            raise LearnerError(grpc.StatusCode.FAILED_PRECONDITION, "no GPU left")
        return "started"

    def get_data(self):
        return {"batch_size": 1}

    def learn(self, samples):
        return {}

    def close_task(self):
        pass


class FailedLearnersTest(unittest.TestCase):
    def test_failed_learners_name_the_refusing_learner(self):
        servers = [LearnerServer(Learner(refuse), "127.0.0.1:0").start()
                   for refuse in (False, True)]
        for server in servers:
            self.addCleanup(server.stop, None)
        good, bad = (f"127.0.0.1:{s.port}" for s in servers)
        daemon = testutil.Daemon(f"""
listen: "127.0.0.1:0"
metrics: {{listen: ""}}
admin: {{listen: "127.0.0.1:0"}}
learners:
  - {{id: good, address: "{good}"}}
  - {{id: bad, address: "{bad}"}}
min_learners: 2
connect: {{backoff: {{initial: 50ms, max: 200ms}}}}
""")
        self.addCleanup(daemon.stop)
        daemon.wait_for_line("serving: 2 of 2")
        client = AggregatorClient(daemon.address, timeout=testutil.LONG_WAIT)
        self.addCleanup(client.close)
        with self.assertRaises(AggregatorError) as caught:
            client.start_task({"task_id": "t"})
        error = caught.exception
        self.assertEqual(error.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(f"bad ({bad})", error.details)  # the text as before
        self.assertEqual(len(error.failed_learners), 1)
        failed = error.failed_learners[0]
        self.assertEqual((failed.id, failed.address, failed.code),
                         ("bad", bad, grpc.StatusCode.FAILED_PRECONDITION))
        self.assertEqual(failed.message, "LearnerError: no GPU left")

    def test_no_failed_learners_from_a_plain_learner(self):
        server = LearnerServer(Learner(True), "127.0.0.1:0").start()
        self.addCleanup(server.stop, None)
        client = AggregatorClient(f"127.0.0.1:{server.port}", timeout=testutil.LONG_WAIT)
        self.addCleanup(client.close)
        with self.assertRaises(AggregatorError) as caught:
            client.start_task({})
        self.assertEqual(caught.exception.failed_learners, [])


if __name__ == "__main__":
    sys.exit(testutil.main())
