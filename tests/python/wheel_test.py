"""The SDK as a user gets it: tools/python/build_wheel, a fresh venv
(--system-site-packages, for Debian's grpcio, protobuf and numpy), `pip install
--no-index` of the wheel, then the README's Python snippets run from the installed
package, outside the checkout and with no PYTHONPATH (so do a worker of the worker
runtime and the DQN example's learner and coordinator); `mypy --strict` (Debian's) clean
on the wheel's package and on the snippets as user code of the installed package."""

import json
import os
import re
import socket
import subprocess
import sys
import time
import unittest
import zipfile

import testutil
from learner_aggregator._proto import worker_pb2
from learner_aggregator.worker import WORKER_FD_ENV, WorkerChannel

ROOT = os.getcwd()  # the runfiles root (or a checkout)


def readme_python_snippets() -> "list[str]":
    """The Python programs of the README's "## Python" section: its indented code blocks
    that start with an import."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text[text.index("\n## Python\n"):]
    section = section[:section.index("\n## ", 1)]
    snippets = []
    for block in re.findall(r"(?:\n(?:    .*|[ \t]*)(?=\n))+", section):
        code = "\n".join(line[4:] for line in block.strip("\n").split("\n")) + "\n"
        if code.startswith(("import ", "from ")):
            snippets.append(code)
    return snippets


def clean_env() -> "dict[str, str]":
    """The environment with nothing pointing Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    return env


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = testutil.temp_dir()
        started = time.monotonic()
        built = subprocess.run([os.path.join(ROOT, "tools/python/build_wheel"),
                                os.path.join(cls.work, "dist")], capture_output=True,
                               text=True, timeout=300, cwd=cls.work)
        assert built.returncode == 0, built.stderr
        cls.wheel = built.stdout.strip()
        cls.venv = os.path.join(cls.work, "V")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", cls.venv],
                       check=True, timeout=300, cwd=cls.work, env=clean_env())
        pip = subprocess.run([os.path.join(cls.venv, "bin/pip"), "install", "--no-index",
                              cls.wheel], capture_output=True, text=True, timeout=300,
                             cwd=cls.work, env=clean_env())
        assert pip.returncode == 0, pip.stdout + pip.stderr
        print(f"wheel built, venv made and wheel installed in "
              f"{time.monotonic() - started:.1f}s", flush=True)
        cls.python = os.path.join(cls.venv, "bin/python")
        cls.snippets = readme_python_snippets()

    def run_python(self, *args, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, *args], capture_output=True, text=True,
                              timeout=testutil.LONG_WAIT, cwd=self.work, env=clean_env(),
                              **kwargs)

    def test_the_wheel_holds_one_typed_package_with_its_stubs(self):
        self.assertRegex(os.path.basename(self.wheel),
                         r"^learner_aggregator-\d+\.\d+\.\d+-py3-none-any\.whl$")
        with zipfile.ZipFile(self.wheel) as wheel:
            names = wheel.namelist()
            metadata = wheel.read(next(n for n in names if n.endswith("/METADATA"))).decode()
        top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        self.assertEqual(top, {"learner_aggregator"})  # no `proto`, no `grpc_health`
        for name in ("py.typed", "_proto/learner_pb2.py", "_proto/learner_pb2_grpc.py",
                     "_proto/health_pb2_grpc.py", "_proto/learner_pb2.pyi"):
            self.assertIn(f"learner_aggregator/{name}", names)
        for requirement in ("grpcio", "protobuf", "numpy"):
            self.assertRegex(metadata, rf"Requires-Dist: {requirement}\b")
        self.assertRegex(metadata, r"Requires-Dist: torch.*extra == .torch.")

        where = self.run_python("-c", "import learner_aggregator, learner_aggregator.worker;"
                                "print(learner_aggregator.__file__)")
        self.assertEqual(where.returncode, 0, where.stderr)
        self.assertTrue(where.stdout.startswith(self.venv), where.stdout)
        for shadow in ("proto", "grpc_health"):
            missing = self.run_python("-c", f"import {shadow}")
            self.assertNotEqual(missing.returncode, 0, f"`import {shadow}` works")

    def test_readme_snippets_run_from_the_installed_package(self):
        learners = [s for s in self.snippets if "serve(" in s]
        coordinators = [s for s in self.snippets if "AggregatorClient(" in s]
        self.assertEqual((len(learners), len(coordinators)), (1, 1), self.snippets)
        paths = []
        for name, code in (("my_learner.py", learners[0]),
                           ("my_coordinator.py", coordinators[0])):
            paths.append(os.path.join(self.work, name))
            with open(paths[-1], "w") as f:
                f.write(code)
        learner, port = self.start_learner([paths[0], "127.0.0.1:0"])
        # A coordinator talks to one learner exactly as to an aggregator.
        coordinator = self.run_python(paths[1], f"127.0.0.1:{port}")
        self.assertEqual(coordinator.returncode, 0, coordinator.stderr)
        lines = coordinator.stdout.splitlines()
        self.assertEqual([float(line.split()[0]) for line in lines], [1, 2, 3, 4, 5])
        self.assertIn("['4-0', '4-1', '4-2']", lines[-1])
        learner.terminate()
        self.assertEqual(learner.wait(testutil.LONG_WAIT), 0)

    def start_learner(self, argv: "list[str]") -> "tuple[subprocess.Popen, int]":
        """A learner process of the venv's python; its port, from the line serve() prints."""
        learner = subprocess.Popen([self.python, *argv], cwd=self.work, env=clean_env(),
                                   stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (learner.poll() is None and learner.kill(), learner.wait(),
                                 learner.stdout.close()))
        for line in learner.stdout:
            if "learner listening on 127.0.0.1:" in line:
                return learner, int(line.rsplit(":", 1)[1])
        raise AssertionError(f"the learner exited with {learner.wait()} before listening")

    def test_worker_runtime_runs_from_the_installed_package(self):
        program = os.path.join(self.work, "worker.py")
        with open(program, "w") as f:
            f.write("import sys\nfrom learner_aggregator.worker import run_worker\n"
                    "class Doubler:\n    def double(self, x: float) -> float:\n"
                    "        return 2 * x\nsys.exit(run_worker(Doubler))\n")
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent.settimeout(testutil.LONG_WAIT)
        env = dict(clean_env(), **{WORKER_FD_ENV: str(child.fileno())})
        process = subprocess.Popen([self.python, program], cwd=self.work, env=env,
                                   pass_fds=[child.fileno()])
        child.close()
        channel = WorkerChannel(parent)
        self.addCleanup(channel.close)
        self.addCleanup(lambda: (process.poll() is None and process.kill(), process.wait()))
        self.assertEqual(channel.read(worker_pb2.WorkerReply).method, "_init")
        request = worker_pb2.WorkerRequest(req_id="1", method="double")
        request.args.values.add().number_value = 21
        channel.write(request)
        self.assertEqual(channel.read(worker_pb2.WorkerReply).data.number_value, 42)
        channel.write(worker_pb2.WorkerRequest(req_id="2", method="_shutdown"))
        self.assertEqual(process.wait(testutil.LONG_WAIT), 0)

    def test_dqn_example_runs_from_the_installed_package(self):
        example = os.path.join(ROOT, "tools/python/examples/cartpole_dqn")
        learner, port = self.start_learner([os.path.join(example, "learner.py"),
                                            "--listen", "127.0.0.1:0"])
        summary = os.path.join(self.work, "summary.json")
        run = subprocess.run(
            [self.python, os.path.join(example, "coordinator.py"), "--address",
             f"127.0.0.1:{port}", "--max-env-steps", "400", "--learning-starts", "300",
             "--summary", summary, "--no-progress"], cwd=self.work, env=clean_env(),
            capture_output=True, text=True, timeout=240)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        with open(summary) as f:
            self.assertEqual(json.load(f)["train_steps"], 101)
        learner.terminate()
        self.assertEqual(learner.wait(testutil.LONG_WAIT), 0)

    def write_snippets(self) -> "list[str]":
        paths = []
        for i, code in enumerate(self.snippets):
            paths.append(os.path.join(self.work, f"snippet_{i}.py"))
            with open(paths[-1], "w") as f:
                f.write(code)
        return paths

    def mypy(self, *args: str, cwd: str) -> str:
        started = time.monotonic()
        run = subprocess.run(["/usr/bin/mypy", "--no-incremental", *args], cwd=cwd,
                             env=clean_env(), capture_output=True, text=True, timeout=300)
        print(f"mypy {' '.join(args)}: {run.stdout.strip()} "
              f"({time.monotonic() - started:.1f}s)", flush=True)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        return run.stdout

    def test_mypy_strict_is_clean_on_the_package_and_the_snippets(self):
        unpacked = os.path.join(self.work, "unpacked")
        with zipfile.ZipFile(self.wheel) as wheel:
            wheel.extractall(unpacked)
        config = os.path.join(ROOT, "tools/python/pyproject.toml")  # strict = true
        out = self.mypy("--strict", "--config-file", config, "-p", "learner_aggregator",
                        cwd=unpacked)
        self.assertIn("Success: no issues found", out)
        # User code: no configuration of ours, the package found in the venv (py.typed).
        paths = self.write_snippets()
        out = self.mypy("--strict", "--python-executable", self.python, *paths, cwd=self.work)
        self.assertIn(f"Success: no issues found in {len(paths)} source files", out)
        # ... and the types are real: a learner missing a method is caught.
        broken = os.path.join(self.work, "broken.py")
        with open(broken, "w") as f:
            f.write(next(s for s in self.snippets if "serve(" in s).replace(
                "def learn(", "def not_learn("))
        run = subprocess.run(["/usr/bin/mypy", "--no-incremental", "--strict",
                              "--python-executable", self.python, broken], cwd=self.work,
                             env=clean_env(), capture_output=True, text=True, timeout=300)
        self.assertIn('missing following "Learner" protocol member', run.stdout)


if __name__ == "__main__":
    sys.exit(testutil.main())
