"""A small supervised worker for the tests: sample_worker.py [ok|init-fail].

ok:        serves a Counter (methods add, fail, crash, interrupt, quit; attributes
           count, pid, name).
init-fail: its factory raises, which run_worker reports as INIT_FAILED.
"""

import os
import sys

from learner_aggregator.worker import run_worker


class Counter:
    """State that survives calls, so a restart is visible (count starts at 0 again)."""

    name = "counter"

    def __init__(self) -> None:
        self.count = 0
        self.pid = os.getpid()

    def add(self, n: float) -> float:
        self.count += n
        return self.count

    def echo(self, *args):
        return list(args)

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def crash(self) -> None:
        os._exit(70)  # as a crash: no reply

    def interrupt(self) -> None:
        raise KeyboardInterrupt("pressed")

    def quit(self, code: float) -> None:
        raise SystemExit(int(code))


def broken_factory() -> Counter:
    raise RuntimeError("no GPU here")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    sys.exit(run_worker(Counter if mode == "ok" else broken_factory))
