"""Shared helpers of the Python tests: a unittest main that tools/test can count, waits
with deadlines, free ports, and aggregatord as a real process."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Callable, List, Optional, TypeVar

T = TypeVar("T")

# Generous bound for what should happen at once on a loaded 2-core machine.
LONG_WAIT = 30.0


def main() -> int:
    """Runs the calling module's tests; prints "test cases: N | P passed | F failed"
    (the line tools/test counts, as for Catch2) and returns the exit code."""
    program = unittest.main(module="__main__", exit=False, verbosity=2)
    result = program.result
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"test cases: {result.testsRun} | {passed} passed | {failed} failed", flush=True)
    return 0 if result.wasSuccessful() and result.testsRun > 0 else 1


def wait_until(condition: Callable[[], Optional[T]], what: str,
               timeout: float = LONG_WAIT, interval: float = 0.05) -> T:
    """Re-checks `condition` until it returns something truthy, which is returned;
    AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def free_port_run(count: int) -> int:
    """A port p with p .. p+count-1 all free on loopback right now."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError(f"no {count} consecutive free loopback ports in 100 attempts")


def example_config(path: str, replacements) -> str:
    """The configuration file at `path` with each (regex, text) of `replacements`
    replaced, each exactly once (an example that changed fails loudly)."""
    with open(path) as f:
        text = f.read()
    for pattern, new in replacements:
        text, count = re.subn(pattern, new, text)
        assert count == 1, f"{path} no longer has {pattern}"
    return text


def temp_dir() -> str:
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


class Daemon:
    """aggregatord (from the runfiles) with `config_text` as its configuration. Its log
    (which includes its workers' output) is collected by a thread and echoed to
    stderr; wait_for_line() waits on it with a deadline."""

    BINARY = "daemon/aggregatord"

    def __init__(self, config_text: str, directory: Optional[str] = None) -> None:
        self.directory = directory or temp_dir()
        self.config_path = os.path.join(self.directory, "aggregator.yaml")
        with open(self.config_path, "w") as f:
            f.write(config_text)
        self.lines: List[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            [self.BINARY, "--config", self.config_path], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, bufsize=1)
        threading.Thread(target=self._collect, daemon=True).start()
        line = self.wait_for_line("aggregatord listening on ")
        self.address = line.split("aggregatord listening on ", 1)[1].split()[0]
        # The daemon logs "admin on ADDR" (unless admin.listen is off) before this.
        self.wait_for_line("Learn batches in flight are bounded by")
        self.admin_address: Optional[str] = None
        with self._changed:
            for line in self.lines:
                if "admin on " in line:
                    self.admin_address = line.split("admin on ", 1)[1].split()[0]

    def _collect(self) -> None:
        for line in self.process.stdout:
            sys.stderr.write("  | " + line)
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append(None)  # end of output
            self._changed.notify_all()

    def wait_for_line(self, needle: str, timeout: float = LONG_WAIT, start: int = 0) -> str:
        """The first log line from index `start` on that contains `needle`."""
        deadline = time.monotonic() + timeout
        index = start
        with self._changed:
            while True:
                while index < len(self.lines):
                    line = self.lines[index]
                    if line is None:
                        raise AssertionError(f"aggregatord ended before a line with '{needle}'")
                    if needle in line:
                        return line
                    index += 1
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no aggregatord line with '{needle}' in {timeout:.0f}s")
                self._changed.wait(left)

    def stop(self, timeout: float = LONG_WAIT) -> int:
        """SIGTERM, then the exit code (SIGKILL and AssertionError past `timeout`)."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"aggregatord did not stop within {timeout:.0f}s of SIGTERM")
