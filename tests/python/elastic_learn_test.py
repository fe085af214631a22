"""Bounded collectives through the Learn API (issue 28): two learner processes
(tests/python/elastic_learner.py, LearnerServer + ElasticGroup) train together; one is
SIGSTOPped (a hung host: its sockets stay open). The survivor's Learn fails ABORTED
within the collective bound plus slack, naming the bound, instead of waiting out gloo's
timeout (30 s here); its GetData is answered while that Learn is stuck."""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc

import testutil
from learner_aggregator import AggregatorClient
from learner_aggregator._proto import learner_pb2, learner_pb2_grpc

LEARNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_learner.py")


class ElasticLearnTest(unittest.TestCase):
    def start(self, learner_id: str, directory: str) -> "tuple[subprocess.Popen, str]":
        process = subprocess.Popen([sys.executable, LEARNER, learner_id, directory],
                                   stdout=subprocess.PIPE, text=True)

        def cleanup():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
            process.wait()
            process.stdout.close()

        self.addCleanup(cleanup)
        line = process.stdout.readline()
        self.assertIn("learner listening on", line)
        return process, line.split("listening on ", 1)[1].strip()

    def stub(self, address: str) -> learner_pb2_grpc.LearnerStub:
        channel = grpc.insecure_channel(address)
        self.addCleanup(channel.close)
        return learner_pb2_grpc.LearnerStub(channel)

    def test_a_stopped_member_fails_the_survivors_learn_within_the_bound(self):
        directory = testutil.temp_dir()
        (_, address_a), (b, address_b) = (self.start("a", directory),
                                          self.start("b", directory))
        stubs = [self.stub(address_a), self.stub(address_b)]
        request = learner_pb2.LearnRequest(
            samples=[learner_pb2.Sample(data=b"x")],
            membership=learner_pb2.Membership(generation=1, members=["a", "b"]))

        def learn(stub, results, deadline=testutil.LONG_WAIT):
            started = time.monotonic()
            try:
                stub.Learn(request, timeout=deadline)
                results.append((None, "", time.monotonic() - started))
            except grpc.RpcError as e:
                results.append((e.code(), e.details(), time.monotonic() - started))

        for _ in range(30):  # both together, as an aggregator's plan does
            results: list = []
            callers = [threading.Thread(target=learn, args=(s, results)) for s in stubs]
            for caller in callers:
                caller.start()
            for caller in callers:
                caller.join(testutil.LONG_WAIT)
            self.assertEqual([r[0] for r in results], [None, None], results)

        with AggregatorClient(address_a, timeout=2.0) as a:
            bound = a.get_data()["extra"]["bound"]
            self.assertGreaterEqual(bound, 1.0)  # max(1 s, 20 x p99)
            self.assertLess(bound, 10.0)
            os.kill(b.pid, signal.SIGSTOP)
            results = []
            caller = threading.Thread(target=learn, args=(stubs[0], results))
            caller.start()
            # While that Learn waits in its all-reduce, GetData is answered (each
            # under a 2 s deadline) and says the learn is running.
            testutil.wait_until(lambda: a.get_data()["extra"]["learning"] or results,
                                "a GetData answered during the stuck Learn")
            self.assertFalse(results, "the Learn ended before a GetData saw it running")
            caller.join(testutil.LONG_WAIT)
        code, details, took = results[0]
        self.assertEqual(code, grpc.StatusCode.ABORTED, details)
        self.assertIn("elastic group of a: generation 1 (rank 0 of 2, ['a', 'b'])", details)
        self.assertIn(f"past its bound of {bound:.2f}s", details)
        self.assertGreaterEqual(took, bound)
        self.assertLess(took, bound + 3.0, details)  # gloo's own timeout is 30 s here
        print(f"survivor's Learn ABORTED after {took:.3f}s (bound {bound:.3f}s): {details}")
        os.kill(b.pid, signal.SIGCONT)


if __name__ == "__main__":
    sys.exit(testutil.main())
