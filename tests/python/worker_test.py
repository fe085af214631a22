"""learner_aggregator.worker over a real socketpair: the frames a supervisor sees from a
Python worker process (handshake, calls, errors, init failure, shutdown), and the
"_listening" announcement of serve() under a channel."""

import os
import signal
import socket
import subprocess
import sys
import unittest

import grpc

import testutil
from learner_aggregator._proto import health_pb2, health_pb2_grpc, worker_pb2
from learner_aggregator.structs import from_value, to_value
from learner_aggregator.worker import WORKER_FD_ENV, WorkerChannel

HERE = os.path.dirname(os.path.abspath(__file__))
Kind = worker_pb2.WorkerError


class Child:
    """A Python program started with the child end of a socketpair, as the Supervisor
    does; the test holds the other end."""

    def __init__(self, argv, env=None):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.channel = WorkerChannel(parent)
        parent.settimeout(testutil.LONG_WAIT)  # every read has a deadline
        full_env = dict(os.environ, **(env or {}), **{WORKER_FD_ENV: str(child.fileno())})
        self.process = subprocess.Popen([sys.executable] + argv, env=full_env,
                                        pass_fds=[child.fileno()])
        child.close()

    def read(self) -> worker_pb2.WorkerReply:
        reply = self.channel.read(worker_pb2.WorkerReply)
        assert reply is not None, "the child closed its channel"
        return reply

    def call(self, req_id, method, *args) -> worker_pb2.WorkerReply:
        request = worker_pb2.WorkerRequest(req_id=req_id, method=method)
        for arg in args:
            request.args.values.add().CopyFrom(to_value(arg))
        self.channel.write(request)
        reply = self.read()
        assert reply.req_id == req_id, reply
        return reply

    def wait(self) -> int:
        return self.process.wait(testutil.LONG_WAIT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.channel.close()


class RunWorkerTest(unittest.TestCase):
    def start(self, mode="ok") -> Child:
        child = Child([os.path.join(HERE, "sample_worker.py"), mode])
        self.addCleanup(child.close)
        return child

    def test_handshake_calls_and_shutdown(self):
        child = self.start()
        init = child.read()
        self.assertEqual((init.req_id, init.method, init.HasField("error")), ("", "_init", False))

        reply = child.call("1", "add", 2)
        self.assertFalse(reply.HasField("error"))
        self.assertEqual(from_value(reply.data), 2.0)
        self.assertEqual(from_value(child.call("2", "add", 3.5).data), 5.5)
        self.assertEqual(from_value(child.call("3", "echo", "a", [1, {"b": True}], None).data),
                         ["a", [1.0, {"b": True}], None])
        self.assertEqual(from_value(child.call("4", "_getattr", "count").data), 5.5)
        self.assertEqual(from_value(child.call("5", "_getattr", "name").data), "counter")

        child.channel.write(worker_pb2.WorkerRequest(req_id="6", method="_shutdown"))
        self.assertIsNone(child.channel.read(worker_pb2.WorkerReply))  # not answered
        self.assertEqual(child.wait(), 0)

    def test_errors(self):
        child = self.start()
        child.read()
        cases = [
            (("nope",), Kind.KIND_NO_SUCH_METHOD, "no method 'nope'"),
            (("_private",), Kind.KIND_NO_SUCH_METHOD, "no method '_private'"),
            (("_getattr", "missing"), Kind.KIND_NO_SUCH_ATTRIBUTE, "no attribute 'missing'"),
            (("_getattr", "add"), Kind.KIND_NO_SUCH_ATTRIBUTE, "no attribute 'add'"),
            (("_getattr",), Kind.KIND_FAILED, "_getattr needs the attribute name"),
            (("fail", "bad input"), Kind.KIND_FAILED, "ValueError: bad input"),
            (("add",), Kind.KIND_FAILED, "TypeError"),  # missing argument
        ]
        for i, (call, kind, message) in enumerate(cases):
            with self.subTest(call=call):
                reply = child.call(str(i), *call)
                self.assertEqual(reply.error.kind, kind)
                self.assertIn(message, reply.error.message)
                self.assertFalse(reply.HasField("data"))
        self.assertEqual(from_value(child.call("ok", "add", 1).data), 1.0)  # still serving
        child.channel.close()  # the end of the channel ends the worker cleanly
        self.assertEqual(child.wait(), 0)

    def test_keyboard_interrupt_and_system_exit_are_answered(self):
        child = self.start()
        child.read()
        reply = child.call("1", "interrupt")
        self.assertEqual(reply.error.kind, Kind.KIND_FAILED)
        self.assertEqual(reply.error.message, "KeyboardInterrupt: pressed")
        self.assertEqual(from_value(child.call("2", "add", 1).data), 1.0)  # still serving
        reply = child.call("3", "quit", 5)
        self.assertEqual(reply.error.kind, Kind.KIND_FAILED)
        self.assertEqual(reply.error.message, "SystemExit: 5")
        self.assertEqual(child.wait(), 5)  # then exits with its code

    def test_init_failure(self):
        child = self.start("init-fail")
        init = child.read()
        self.assertEqual((init.req_id, init.method), ("", "_init"))
        self.assertEqual(init.error.kind, Kind.KIND_INIT_FAILED)
        self.assertIn("RuntimeError: no GPU here", init.error.message)
        self.assertEqual(child.wait(), 1)

    def test_no_channel(self):
        env = {k: v for k, v in os.environ.items() if k != WORKER_FD_ENV}
        run = subprocess.run([sys.executable, os.path.join(HERE, "sample_worker.py")],
                             env=env, capture_output=True, text=True,
                             timeout=testutil.LONG_WAIT)
        self.assertEqual(run.returncode, 2)
        self.assertIn("AGGREGATOR_WORKER_FD is not set", run.stderr)


LEARNER = """
import sys
from learner_aggregator import serve
class Learner:
    batch = 3
    def get_resource(self): return {"gpus": 0}
    def get_data(self): return {"batch_size": self.batch}
    def quit(self, code): raise SystemExit(int(code))
serve(Learner(), sys.argv[1], grace=1.0)
print("serve returned", flush=True)
"""


class ServeUnderChannelTest(unittest.TestCase):
    def start(self) -> Child:
        child = Child(["-c", LEARNER, "127.0.0.1:0"])
        self.addCleanup(child.close)
        return child

    def check_serving(self, port: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            response = health.Check(health_pb2.HealthCheckRequest(service="aggregator.v1.Learner"),
                                    timeout=testutil.LONG_WAIT)
            self.assertEqual(response.status, health_pb2.HealthCheckResponse.SERVING)

    def test_announces_port_then_serves_channel_and_grpc(self):
        child = self.start()
        init = child.read()
        self.assertEqual((init.req_id, init.method, init.HasField("error")), ("", "_init", False))
        listening = child.read()
        self.assertEqual((listening.req_id, listening.method), ("", "_listening"))
        self.assertFalse(listening.HasField("error"))
        port = from_value(listening.data)["port"]
        self.assertGreater(port, 0)
        self.check_serving(int(port))  # bound before it was announced
        self.assertEqual(from_value(child.call("1", "_getattr", "batch").data), 3.0)
        self.assertEqual(from_value(child.call("2", "get_data").data), {"batch_size": 3.0})
        child.channel.write(worker_pb2.WorkerRequest(req_id="3", method="_shutdown"))
        self.assertEqual(child.wait(), 0)

    def test_system_exit_over_the_channel_is_answered_then_exits(self):
        child = self.start()
        child.read()
        child.read()  # _listening
        reply = child.call("1", "quit", 4)
        self.assertEqual(reply.error.kind, Kind.KIND_FAILED)
        self.assertEqual(reply.error.message, "SystemExit: 4")
        self.assertEqual(child.wait(), 4)

    def test_sigterm_drains(self):
        child = self.start()
        child.read()
        port = int(from_value(child.read().data)["port"])
        self.check_serving(port)
        child.process.send_signal(signal.SIGTERM)
        self.assertEqual(child.wait(), 0)


if __name__ == "__main__":
    sys.exit(testutil.main())
