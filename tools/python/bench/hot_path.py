"""The SDK's hot path: a Python coordinator's get_data() + learn() of 64 samples (20
bytes of data, `replay_unique_id` and `weight` in meta) against a Python learner that
does nothing, in another process on loopback (issue 27's figure).

    tools/python/run tools/python/bench/hot_path.py [--steps N] [--profile learner|client]

Prints the median and mean of get_data(), learn() and the step (both), in ms.
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
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        serve(NullLearner(), "127.0.0.1:0", grace=0.0)
    finally:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)


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
        profiler = cProfile.Profile() if args.profile == "client" else None
        with AggregatorClient(f"127.0.0.1:{port}") as client:
            client.start_task({"task_id": "bench"})
            for step in range(args.warmup + args.steps):
                if profiler is not None and step == args.warmup:
                    profiler.enable()
                t0 = time.perf_counter()
                demand = client.get_data()
                t1 = time.perf_counter()
                client.learn(samples[:demand["batch_size"]], demand["plan_id"])
                t2 = time.perf_counter()
                if step >= args.warmup:
                    get_ms.append((t1 - t0) * 1e3)
                    learn_ms.append((t2 - t1) * 1e3)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
