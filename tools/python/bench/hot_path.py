"""The SDK's hot path: a Python coordinator's get_data() + learn() of 64 samples (20
bytes of data, `replay_unique_id` and `weight` in meta) against a Python learner that
does nothing, in another process on loopback (issue 27's figure).

    tools/python/run tools/python/bench/hot_path.py [--steps N] [--profile learner|client]

Prints the median and mean of get_data(), learn() and the step (both), in ms, then the
CPU time per step of the coordinator and of the learner and the load average.
tools/python/bench/hot_path_before_after runs it on an older commit too, in one run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List

from learner_aggregator import AggregatorClient, Sample, serve

BATCH = 64


class NullLearner:
    """Answers every call at once with the least a learner answers."""

    def get_resource(self) -> Dict[str, int]:
        return {"gpus": 0}

    def start_task(self, task_info: Dict[str, Any]) -> None:
        pass

    def get_data(self) -> Dict[str, Any]:
        return {"batch_size": BATCH, "cur_learner_iter": 0}

    def learn(self, samples: List[Sample]) -> Dict[str, Any]:
        return {"learner_step": 1}

    def close_task(self) -> None:
        pass


def run_learner(profile: bool) -> None:
    if not profile:
        serve(NullLearner(), "127.0.0.1:0", grace=0.0)
        return
    # cProfile sees one thread; the learner's work is on gRPC's threads, each started
    # after this: every new thread gets its own profiler, merged at the end.
    profilers: List[cProfile.Profile] = []

    def profile_thread(*_: Any) -> None:
        sys.setprofile(None)
        profiler = cProfile.Profile()
        profilers.append(profiler)
        profiler.enable()

    threading.setprofile(profile_thread)
    try:
        serve(NullLearner(), "127.0.0.1:0", grace=0.0)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        stats = [p for p in profilers if p.getstats()]
        if stats:
            merged = pstats.Stats(stats[0], stream=sys.stderr)
            for profiler in stats[1:]:
                merged.add(profiler)
            merged.sort_stats("tottime").print_stats(30)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--profile", choices=["learner", "client"])
    parser.add_argument("--learner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.learner:
        run_learner(args.profile == "learner")
        return 0

    command = [sys.executable, os.path.abspath(__file__), "--learner"]
    if args.profile == "learner":
        command += ["--profile", "learner"]
    learner = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        line = learner.stdout.readline() if learner.stdout else ""
        port = int(line.rsplit(":", 1)[1])
        samples = [Sample(bytes(range(i % 200, i % 200 + 20)),
                          {"replay_unique_id": f"{i}-0123456789", "weight": 1.0 / (i + 1)})
                   for i in range(BATCH)]
        get_ms: List[float] = []
        learn_ms: List[float] = []
        cpu_start = (0.0, 0.0)
        profiler = cProfile.Profile() if args.profile == "client" else None
        with AggregatorClient(f"127.0.0.1:{port}") as client:
            client.start_task({"task_id": "bench"})
            for step in range(args.warmup + args.steps):
                if step == args.warmup:
                    cpu_start = (time.process_time(), learner_cpu(learner.pid))
                    if profiler is not None:
                        profiler.enable()
                t0 = time.perf_counter()
                demand = client.get_data()
                t1 = time.perf_counter()
                client.learn(samples[:demand["batch_size"]], demand["plan_id"])
                t2 = time.perf_counter()
                if step >= args.warmup:
                    get_ms.append((t1 - t0) * 1e3)
                    learn_ms.append((t2 - t1) * 1e3)
        cpu_ms = ((time.process_time() - cpu_start[0]) * 1e3 / args.steps,
                  (learner_cpu(learner.pid) - cpu_start[1]) * 1e3 / args.steps)
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    finally:
        learner.terminate()
        learner.wait()
    step_ms = [g + l for g, l in zip(get_ms, learn_ms)]
    for name, values in (("get_data()", get_ms), ("learn(64)", learn_ms),
                         ("get_data()+learn(64)", step_ms)):
        print(f"{name:22} median {statistics.median(values):.3f} ms  "
              f"mean {statistics.mean(values):.3f} ms", flush=True)
    # CPU time, which the machine's load moves far less than the wall-clock figures.
    print(f"cpu per step: coordinator {cpu_ms[0]:.3f} ms, learner {cpu_ms[1]:.3f} ms; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    return 0


def learner_cpu(pid: int) -> float:
    """The CPU seconds (user + system, all threads) process `pid` has used (Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main())
