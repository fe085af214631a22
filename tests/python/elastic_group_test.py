"""learner_aggregator.torch.ElasticGroup with real member processes on loopback
(tests/python/elastic_member.py): formation, re-formation on a generation change with
every member taking the state of the most-trained one, a killed member and a stopped
(SIGSTOP) member turning the survivor's collective into LearnerError(ABORTED) within a
bound, a TCP store, and `import learner_aggregator` without torch."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import unittest

import testutil
from learner_aggregator.torch import serve_store

MEMBER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_member.py")


class Member:
    """An elastic_member.py process: ask() sends one command and waits for its answer."""

    def __init__(self, test: unittest.TestCase, learner_id: str, seed: int, *args: str) -> None:
        self.id = learner_id
        self.process = subprocess.Popen([sys.executable, MEMBER, learner_id, str(seed), *args],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.answers: "queue.Queue[object]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        test.addCleanup(self.kill)
        self.ready = False

    def _read(self) -> None:
        for line in self.process.stdout:
            self.answers.put(json.loads(line))
        self.answers.put(EOFError(f"{self.id} exited"))

    def send(self, command: str) -> None:
        if not self.ready:  # torch's import takes a while on a loaded machine
            self.answer()
            self.ready = True
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def answer(self, timeout: float = testutil.LONG_WAIT) -> object:
        try:
            answer = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.id} did not answer within {timeout:.0f}s") from None
        if isinstance(answer, Exception):
            raise answer
        return answer

    def ask(self, command: str) -> object:
        self.send(command)
        return self.answer()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()


def ask_all(members: "list[Member]", command: str) -> "list[object]":
    """The same command to every member at once (a collective needs them all)."""
    for member in members:
        member.send(command)
    return [member.answer() for member in members]


class ElasticGroupTest(unittest.TestCase):
    def setUp(self):
        self.dir = testutil.temp_dir()

    def member(self, learner_id: str, seed: int, *args: str) -> Member:
        return Member(self, learner_id, seed, "--dir", self.dir, *args)

    def test_formation_and_reformation_take_the_most_trained_state(self):
        a, b, c = self.member("a", 1), self.member("b", 2), self.member("c", 3)
        alone = a.ask("join 1 a")["formation"]  # alone: no gloo group, trains as is
        self.assertEqual((alone["rank"], alone["world_size"]), (0, 1))
        self.assertEqual(a.ask("train 5")["step"], 5)
        formed = ask_all([b, c, a], "join 2 b,c,a")
        for rank, answer in enumerate(formed):
            self.assertEqual(answer["formation"]["rank"], rank)
            self.assertEqual(answer["formation"]["world_size"], 3)
            self.assertEqual(answer["formation"]["steps"], [0, 0, 5])
            self.assertEqual(answer["formation"]["source"], 2)  # a trained most
        states = [m.ask("state") for m in (a, b, c)]
        self.assertEqual({s["hash"] for s in states}, {states[0]["hash"]})
        self.assertEqual([s["step"] for s in states], [5, 5, 5])
        self.assertEqual([s["extra"] for s in states], [{"seed": 1}] * 3)  # the user hook
        # The same generation again: nothing to do.
        self.assertEqual(ask_all([a, b, c], "join 2 b,c,a"), [None] * 3)
        trained = ask_all([a, b, c], "train 3")
        self.assertEqual({t["hash"] for t in trained}, {trained[0]["hash"]})
        self.assertEqual({t["step"] for t in trained}, {8})

        # a leaves, d (new, as a restarted member) comes: the group re-forms, and d,
        # at rank 0, takes the state of b (rank 1, first of the most trained).
        a.kill()
        d = self.member("d", 4)
        formed = ask_all([d, b, c], "join 3 d,b,c")
        self.assertEqual([f["formation"]["steps"] for f in formed], [[0, 8, 8]] * 3)
        self.assertEqual([f["formation"]["source"] for f in formed], [1] * 3)
        states = [m.ask("state") for m in (d, b, c)]
        self.assertEqual([s["step"] for s in states], [8, 8, 8])
        self.assertEqual({s["hash"] for s in states}, {trained[0]["hash"]})
        self.assertEqual(states[0]["extra"], {"seed": 1})
        trained = ask_all([d, b, c], "train 2")
        self.assertEqual({t["hash"] for t in trained}, {trained[0]["hash"]})
        self.assertEqual({t["step"] for t in trained}, {10})

    def formed_pair(self, *args: str) -> "tuple[Member, Member]":
        a, b = self.member("a", 1, *args), self.member("b", 2, *args)
        ask_all([a, b], "join 1 a,b")
        ask_all([a, b], "train 30")  # the bound learns what a collective takes here
        return a, b

    def test_a_killed_member_aborts_the_survivors_collective_at_once(self):
        a, b = self.formed_pair()
        b.process.kill()
        b.process.wait()
        answer = a.ask("train 1")
        self.assertEqual(answer["error"], "ABORTED", answer)
        self.assertIn("elastic group of a: generation 1 (rank 0 of 2, ['a', 'b'])",
                      answer["message"])
        self.assertIn("the all-reduce of gradients broke", answer["message"])
        self.assertLess(answer["after"], 5.0, answer)
        print(f"killed member: ABORTED after {answer['after']:.3f}s: {answer['message']}")
        # The next membership (without b) trains on, alone.
        self.assertEqual(a.ask("join 2 a")["formation"]["world_size"], 1)
        self.assertEqual(a.ask("train 1")["step"], 31)

    def test_a_stopped_member_aborts_the_survivors_collective_within_the_bound(self):
        a, b = self.formed_pair()
        bound = a.ask("state")["bound"]
        self.assertGreaterEqual(bound, 1.0)  # max(1 s, 20 x p99)
        self.assertLess(bound, 10.0)
        os.kill(b.process.pid, signal.SIGSTOP)  # hung: its sockets stay open
        answer = a.ask("train 1")
        self.assertEqual(answer["error"], "ABORTED", answer)
        self.assertIn("the all-reduce of gradients waited", answer["message"])
        self.assertIn(f"past its bound of {bound:.2f}s (max(1s, 20 x p99", answer["message"])
        self.assertGreaterEqual(answer["after"], bound)
        self.assertLess(answer["after"], bound + 2.0, answer)  # not gloo's 30 s timeout
        print(f"stopped member: ABORTED after {answer['after']:.3f}s (bound {bound:.3f}s): "
              f"{answer['message']}")
        self.assertEqual(a.ask("join 2 a")["formation"]["world_size"], 1)
        self.assertEqual(a.ask("train 1")["step"], 31)
        os.kill(b.process.pid, signal.SIGCONT)

    def test_the_bound_is_configurable(self):
        a, b = self.formed_pair("--collective-bound", "2.5")
        self.assertEqual(a.ask("state")["bound"], 2.5)
        os.kill(b.process.pid, signal.SIGSTOP)
        answer = a.ask("train 1")
        self.assertEqual(answer["error"], "ABORTED", answer)
        self.assertIn("past its bound of 2.50s (collective_bound 2.5s)", answer["message"])
        self.assertLess(answer["after"], 2.5 + 2.0, answer)
        os.kill(b.process.pid, signal.SIGCONT)

    def test_members_meet_at_a_tcp_store(self):
        port = testutil.free_port_run(1)
        store = serve_store(f"127.0.0.1:{port}")
        self.addCleanup(lambda: store)  # served while referenced
        a = Member(self, "a", 1, "--store", f"127.0.0.1:{port}")
        b = Member(self, "b", 2, "--store", f"127.0.0.1:{port}")
        formed = ask_all([a, b], "join 7 a,b")
        self.assertEqual([f["formation"]["rank"] for f in formed], [0, 1])
        trained = ask_all([a, b], "train 2")
        self.assertEqual(trained[0], trained[1])

    def test_the_package_imports_without_torch(self):
        run = subprocess.run(
            [sys.executable, "-c", "import sys; sys.modules['torch'] = None\n"
             "import learner_aggregator, learner_aggregator.worker\n"
             "try:\n    import learner_aggregator.torch\n"
             "except ImportError as e:\n    print(e)\n"],
            capture_output=True, text=True, timeout=testutil.LONG_WAIT)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("learner_aggregator.torch needs PyTorch", run.stdout)


if __name__ == "__main__":
    sys.exit(testutil.main())
