"""The SDK through the real gRPC stack: a LearnerServer on 127.0.0.1:0 and an
AggregatorClient calling it (a learner answers the same Learner API as an aggregator)."""

import os
import subprocess
import sys
import threading
import unittest
import zipfile

import grpc
import numpy as np
import torch

import testutil
from learner_aggregator import (AggregatorClient, AggregatorError, LearnerError,
                                LearnerServer, Sample, decode_arrays, encode_arrays)
from learner_aggregator._proto import health_pb2, health_pb2_grpc

Status = health_pb2.HealthCheckResponse


class RecordingLearner:
    """A learner that records what it was given and answers from it."""

    def __init__(self):
        self.task_info = None
        self.samples = []
        self.closed = False

    def get_resource(self):
        return {"gpus": 2, "learners": 1}

    def start_task(self, task_info):
        self.task_info = task_info
        return "task started"

    def get_data(self):
        return {"batch_size": 4, "cur_learner_iter": 7, "task_id": "t1", "buffer_id": "b1",
                "extra": {"note": "x", "sizes": [1, 2]}}

    def learn(self, samples):
        if any(s.meta.get("fail") for s in samples):
            raise ValueError("bad sample " + samples[0].meta["fail"])
        if any(s.meta.get("interrupt") for s in samples):
            raise KeyboardInterrupt("pressed")
        if any(s.meta.get("refuse") for s in samples):
            raise LearnerError(grpc.StatusCode.FAILED_PRECONDITION, "no task open")
        self.samples.extend(samples)
        sums = [float(decode_arrays(s.data)["obs"].sum()) for s in samples]
        return {"task_id": "t1", "buffer_id": "b1", "learner_step": len(self.samples),
                "sums": sums, "priority_info": {"replay_unique_id":
                                                [s.meta["replay_unique_id"] for s in samples]},
                "loss": np.float32(0.5)}

    def close_task(self):
        self.closed = True


class SdkTest(unittest.TestCase):
    def setUp(self):
        self.learner = RecordingLearner()
        self.server = LearnerServer(self.learner, "127.0.0.1:0").start()
        self.addCleanup(self.server.stop, None)
        self.client = AggregatorClient(f"127.0.0.1:{self.server.port}", timeout=testutil.LONG_WAIT)
        self.addCleanup(self.client.close)

    def test_every_rpc_round_trips(self):
        # A plain learner does not serve LearnStream.
        self.assertEqual(self.client.resource(),
                         {"gpus": 2, "learners": 1, "learn_stream": False})
        info = {"task_id": "t1", "lr": 0.001, "layers": [64, 64], "nested": {"on": True},
                "none": None}
        self.assertEqual(self.client.start_task(info), {"message": "task started"})
        self.assertEqual(self.learner.task_info,
                         {"task_id": "t1", "lr": 0.001, "layers": [64.0, 64.0],
                          "nested": {"on": True}, "none": None})
        self.assertEqual(self.client.get_data(), {
            "batch_size": 4, "cur_learner_iter": 7, "task_id": "t1", "buffer_id": "b1",
            "plan_id": "", "extra": {"note": "x", "sizes": [1.0, 2.0]},
            # Set by an aggregator; a plain learner leaves them empty.
            "membership": {"generation": 0, "members": []}, "learners": 0})

        samples = [Sample(encode_arrays({"obs": np.full((2, 3), i, np.float32)}),
                          {"replay_unique_id": f"id-{i}"}) for i in range(4)]
        reply = self.client.learn(samples)
        self.assertEqual(reply["task_id"], "t1")
        self.assertEqual(reply["buffer_id"], "b1")
        self.assertEqual(reply["info"]["sums"], [0.0, 6.0, 12.0, 18.0])
        self.assertEqual(reply["info"]["priority_info"]["replay_unique_id"],
                         ["id-0", "id-1", "id-2", "id-3"])
        self.assertEqual(reply["info"]["loss"], 0.5)
        self.assertEqual([s.data for s in self.learner.samples], [s.data for s in samples])
        self.assertEqual(self.learner.samples[3].meta, {"replay_unique_id": "id-3"})

        self.assertEqual(self.client.close_task(), {"message": ""})
        self.assertTrue(self.learner.closed)

    def test_exception_becomes_internal_and_the_server_goes_on(self):
        with self.assertRaises(AggregatorError) as caught:
            self.client.learn([Sample(b"", {"fail": "#7"})])
        self.assertEqual(caught.exception.code, grpc.StatusCode.INTERNAL)
        self.assertEqual(caught.exception.details, "ValueError: bad sample #7")
        self.assertIn("Learn: INTERNAL: ValueError: bad sample #7", str(caught.exception))
        self.assertEqual(self.client.resource()["gpus"], 2)

    def test_keyboard_interrupt_is_answered_and_the_server_goes_on(self):
        # Unanswered, the call would wait out the client's deadline (DEADLINE_EXCEEDED).
        with self.assertRaises(AggregatorError) as caught:
            self.client.learn([Sample(b"", {"interrupt": True})])
        self.assertEqual(caught.exception.code, grpc.StatusCode.INTERNAL)
        self.assertEqual(caught.exception.details, "KeyboardInterrupt: pressed")
        self.assertEqual(self.client.resource()["gpus"], 2)

    def test_one_error_root(self):
        from learner_aggregator import LearnerAggregatorError
        from learner_aggregator.worker import WorkerChannelError
        for error in (AggregatorError, LearnerError, WorkerChannelError):
            self.assertTrue(issubclass(error, LearnerAggregatorError), error)
        with self.assertRaises(LearnerAggregatorError):
            self.client.learn([Sample(b"", {"refuse": True})])

    def test_learner_error_code_passes_through(self):
        with self.assertRaises(AggregatorError) as caught:
            self.client.learn([Sample(b"", {"refuse": True})])
        self.assertEqual(caught.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertEqual(caught.exception.details, "LearnerError: no task open")

    def test_queries_are_answered_while_a_learn_is_stuck(self):
        # A learner stuck in a collective must still say what it wants (issue 28): its
        # GetData and GetResource do not queue behind its Learn.
        class Stuck(RecordingLearner):
            def __init__(self):
                super().__init__()
                self.entered, self.release = threading.Event(), threading.Event()

            def learn(self, samples):
                self.entered.set()
                if not self.release.wait(testutil.LONG_WAIT):
                    raise TimeoutError("never released")
                return {"learner_step": 1}

        learner = Stuck()
        self.addCleanup(learner.release.set)
        with LearnerServer(learner, "127.0.0.1:0") as server:
            address = f"127.0.0.1:{server.port}"
            with AggregatorClient(address, timeout=testutil.LONG_WAIT) as slow, \
                    AggregatorClient(address, timeout=2.0) as quick:
                learned = []
                caller = threading.Thread(target=lambda: learned.append(
                    slow.learn([Sample(b"", {})])), daemon=True)
                caller.start()
                self.assertTrue(learner.entered.wait(testutil.LONG_WAIT))
                # DEADLINE_EXCEEDED after 2 s while calls were serialized.
                self.assertEqual(quick.get_data()["batch_size"], 4)
                self.assertEqual(quick.resource()["gpus"], 2)
                self.assertFalse(learned)  # the Learn is still stuck
                learner.release.set()
                caller.join(testutil.LONG_WAIT)
                self.assertEqual(learned[0]["info"]["learner_step"], 1)

    def test_missing_method_and_bad_result(self):
        class Partial:
            def get_data(self):
                return {"batch_size": "many"}

        with LearnerServer(Partial(), "127.0.0.1:0") as server:
            with AggregatorClient(f"127.0.0.1:{server.port}", timeout=testutil.LONG_WAIT) as c:
                with self.assertRaises(AggregatorError) as caught:
                    c.resource()
                self.assertEqual(caught.exception.code, grpc.StatusCode.UNIMPLEMENTED)
                self.assertIn("get_resource()", caught.exception.details)
                with self.assertRaises(AggregatorError) as caught:
                    c.get_data()
                self.assertEqual(caught.exception.code, grpc.StatusCode.INTERNAL)
                self.assertIn("get_data() returned", caught.exception.details)

    def test_unreachable_address_fails_with_a_deadline(self):
        port = testutil.free_port_run(1)
        with AggregatorClient(f"127.0.0.1:{port}", timeout=0.5) as client:
            with self.assertRaises(AggregatorError) as caught:
                client.get_data()
        self.assertIn(caught.exception.code,
                      (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED))

    def test_health_serving_until_stopped(self):
        channel = grpc.insecure_channel(f"127.0.0.1:{self.server.port}")
        self.addCleanup(channel.close)
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "aggregator.v1.Learner"):
            response = health.Check(health_pb2.HealthCheckRequest(service=service),
                                    timeout=testutil.LONG_WAIT)
            self.assertEqual(response.status, Status.SERVING)
        with self.assertRaises(grpc.RpcError) as caught:
            health.Check(health_pb2.HealthCheckRequest(service="other"),
                         timeout=testutil.LONG_WAIT)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)

        watch = health.Watch(health_pb2.HealthCheckRequest(service="aggregator.v1.Learner"),
                             timeout=testutil.LONG_WAIT)
        self.assertEqual(next(watch).status, Status.SERVING)
        # A grace longer than the wait below: the open Watch must not hold the drain.
        stopper = threading.Thread(target=self.server.stop, args=(2 * testutil.LONG_WAIT,))
        stopper.start()
        self.assertEqual(next(watch).status, Status.NOT_SERVING)
        self.assertIsNone(next(watch, None))  # the stream ends after it
        stopper.join(testutil.LONG_WAIT)
        self.assertFalse(stopper.is_alive())

    def test_large_messages_within_max_message_bytes(self):
        big = Sample(encode_arrays({"obs": np.zeros(6 << 20, np.uint8)}),
                     {"replay_unique_id": "b"})
        reply = self.client.learn([big])  # 6 MiB: over gRPC's 4 MiB default
        self.assertEqual(reply["info"]["sums"], [0.0])
        with LearnerServer(self.learner, "127.0.0.1:0", max_message_bytes=1 << 20) as small:
            with AggregatorClient(f"127.0.0.1:{small.port}", timeout=testutil.LONG_WAIT) as c:
                with self.assertRaises(AggregatorError) as caught:
                    c.learn([big])
        self.assertEqual(caught.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_tls_and_mtls_both_ways(self):
        d = testutil.temp_dir()

        def openssl(*args):
            subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=ca", "-keyout", "ca.key", "-out", "ca.crt")
        for name in ("server", "client"):
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-keyout", f"{name}.key", "-out", f"{name}.csr")
            with open(os.path.join(d, f"{name}.ext"), "w") as f:
                f.write("subjectAltName=DNS:localhost\n")
            openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out",
                    f"{name}.crt")
        path = lambda name: os.path.join(d, name)  # noqa: E731
        server = LearnerServer(RecordingLearner(), "127.0.0.1:0", tls_cert=path("server.crt"),
                               tls_key=path("server.key"),
                               tls_client_ca=path("ca.crt")).start()
        self.addCleanup(server.stop, None)
        address = f"127.0.0.1:{server.port}"
        with AggregatorClient(address, timeout=testutil.LONG_WAIT, tls_ca=path("ca.crt"),
                              tls_cert=path("client.crt"), tls_key=path("client.key"),
                              tls_server_name="localhost") as client:
            self.assertEqual(client.resource()["gpus"], 2)
        for kwargs in ({}, {"tls_ca": path("ca.crt"), "tls_server_name": "localhost"}):
            with self.subTest(kwargs=kwargs), \
                    AggregatorClient(address, timeout=5, **kwargs) as client:
                with self.assertRaises(AggregatorError) as raised:
                    client.resource()
                self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)

    def test_bind_failure_is_an_os_error(self):
        with self.assertRaises(OSError):
            LearnerServer(self.learner, f"127.0.0.1:{self.server.port}").start()


class ArraysTest(unittest.TestCase):
    def test_round_trip_keeps_dtype_shape_and_values(self):
        arrays = {"obs": np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32),
                  "action": np.array(3, np.int64), "done": np.array([True, False]),
                  "tensor": torch.arange(6, dtype=torch.float64).reshape(2, 3)}
        decoded = decode_arrays(encode_arrays(arrays))
        self.assertEqual(sorted(decoded), sorted(arrays))
        for name, value in arrays.items():
            expected = value.numpy() if isinstance(value, torch.Tensor) else value
            self.assertEqual(decoded[name].dtype, expected.dtype, name)
            np.testing.assert_array_equal(decoded[name], expected)

    def test_object_arrays_are_refused_both_ways(self):
        with self.assertRaises(TypeError):
            encode_arrays({"x": np.array([{"a": 1}], dtype=object)})
        import io
        pickled = io.BytesIO()
        np.savez(pickled, x=np.array([{"a": 1}], dtype=object))  # a pickle inside
        with self.assertRaises(ValueError):
            decode_arrays(pickled.getvalue())
        with self.assertRaises(Exception):
            decode_arrays(b"not an npz")

    def test_size_bound_refuses_before_allocating(self):
        import io
        import tracemalloc
        # 16 MiB of zeros in a few kilobytes of compressed npz.
        compressed = io.BytesIO()
        np.savez_compressed(compressed, x=np.zeros(16 << 20, np.uint8))
        bomb = compressed.getvalue()
        self.assertLess(len(bomb), 1 << 20)
        # A header declaring 1 TiB over no data at all (uncompressed).
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "|u1", "fortran_order": False, "shape": (1 << 40,)})
        liar = io.BytesIO()
        with zipfile.ZipFile(liar, "w") as archive:
            archive.writestr("x.npy", header.getvalue())
        cases = [(bomb, {"max_bytes": 8 << 20}, "16777216 bytes, over max_bytes 8388608"),
                 (liar.getvalue(), {}, f"{1 << 40} bytes, over max_bytes {256 << 20}")]
        for data, kwargs, message in cases:
            with self.subTest(message=message):
                tracemalloc.start()
                try:
                    with self.assertRaises(ValueError) as caught:
                        decode_arrays(data, **kwargs)
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                self.assertIn(message, str(caught.exception))
                self.assertLess(peak, 4 << 20)  # nothing of the declared size allocated
        # Within the bound (the default is 256 MiB), and with no bound.
        self.assertEqual(decode_arrays(bomb)["x"].nbytes, 16 << 20)
        self.assertEqual(decode_arrays(bomb, max_bytes=16 << 20)["x"].nbytes, 16 << 20)
        self.assertEqual(decode_arrays(bomb, max_bytes=None)["x"].nbytes, 16 << 20)
        with self.assertRaises(ValueError):
            decode_arrays(b"\x93NUMPY plain .npy, not an npz")


if __name__ == "__main__":
    sys.exit(testutil.main())
