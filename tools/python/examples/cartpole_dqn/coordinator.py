"""The DQN coordinator: collects CartPole experience epsilon-greedily with the newest
weights, keeps a prioritized replay buffer, and trains through a Learner API server
(aggregatord with N DQN replicas, or a single learner) or, with --direct, a learner
object in this process (the no-aggregator baseline).

    coordinator.py --address 127.0.0.1:22280 --plot cartpole.png
    coordinator.py --direct --plot direct.png

Each training step: GetData (the total demand and its plan), a prioritized sample of
that many transitions sent with their replay_unique_id and importance weight, Learn;
the merged priority_info updates the buffer (checked to line up with the ids sent),
and a new weights_version makes the actor load the checkpoint the learners wrote. It
stops once the mean return of the last --window episodes reaches --target-return, or
after --max-env-steps. The summary (JSON) and a plot of episode return against
environment steps are written at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cartpole import CartPole  # noqa: E402
from dqn import DQNLearner, encode_transition, load_checkpoint, make_q_network  # noqa: E402
from learner_aggregator import AggregatorClient, AggregatorError, Sample  # noqa: E402
from replay import PrioritizedReplay  # noqa: E402


class DirectLearner:
    """AggregatorClient's calls answered by a DQNLearner in this process."""

    def __init__(self, batch_size: int) -> None:
        self.learner = DQNLearner(batch_size)

    def start_task(self, info):
        return {"message": self.learner.start_task(info)}

    def get_data(self):
        return dict(self.learner.get_data(), plan_id="")

    def learn(self, samples, plan_id=None):
        return {"info": self.learner.learn(samples)}

    def close_task(self):
        return {"message": self.learner.close_task()}


def wait_ready(client: AggregatorClient, timeout: float) -> None:
    """Waits until the aggregator serves (grpc.health.v1: min_learners are ready; a
    plain learner is ready when it answers)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if client.serving():
                return
            problem = "not serving"
        except AggregatorError as e:
            problem = str(e)
        if time.monotonic() > deadline:
            raise SystemExit(f"coordinator: {client.address} not ready after {timeout:.0f}s: "
                             f"{problem}")
        time.sleep(0.2)


def as_list(value) -> list:
    """A merged scalar is a list (one per learner); a single learner's is a scalar."""
    return value if isinstance(value, list) else [value]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--address", help="a Learner API server: aggregatord or one learner")
    where.add_argument("--direct", action="store_true", help="train in this process")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-env-steps", type=int, default=100_000)
    p.add_argument("--target-return", type=float, default=195.0)
    p.add_argument("--window", type=int, default=20, help="episodes the mean is over")
    p.add_argument("--batch-size", type=int, default=64, help="--direct only; else GetData's")
    p.add_argument("--buffer", type=int, default=50_000)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--train-every", type=int, default=1, help="env steps per training step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--target-update", type=int, default=500, help="training steps")
    p.add_argument("--weights-every", type=int, default=5, help="training steps")
    p.add_argument("--eps-start", type=float, default=1.0)
    p.add_argument("--eps-end", type=float, default=0.05)
    p.add_argument("--eps-steps", type=int, default=10_000, help="env steps of the decay")
    p.add_argument("--alpha", type=float, default=0.6, help="priority exponent")
    p.add_argument("--beta-start", type=float, default=0.4, help="importance exponent")
    p.add_argument("--checkpoint", help="the weights file (default: a temporary one)")
    p.add_argument("--plot", help="PNG of episode return against environment steps")
    p.add_argument("--summary", help="also write the summary JSON here")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per call")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--elastic", action="store_true",
                   help="a failed training step (a learner lost, its group re-forming) "
                   "is counted and skipped, not fatal")
    return p.parse_args(argv)


def train(args: argparse.Namespace) -> Dict[str, Any]:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env = CartPole(seed=args.seed)
    replay = PrioritizedReplay(args.buffer, args.alpha, rng)
    checkpoint = args.checkpoint or os.path.join(tempfile.mkdtemp(), "weights.pt")
    if args.direct:
        learner = DirectLearner(args.batch_size)
    else:
        learner = AggregatorClient(args.address, timeout=args.timeout)
        wait_ready(learner, args.timeout)
    learner.start_task({
        "task_id": "cartpole-dqn", "buffer_id": "replay", "seed": args.seed, "lr": args.lr,
        "gamma": args.gamma, "target_update": args.target_update,
        "weights_every": args.weights_every, "checkpoint": os.path.abspath(checkpoint)})
    actor = make_q_network()
    weights = load_checkpoint(checkpoint)
    actor.load_state_dict(weights["state_dict"])
    version = weights["version"]

    episodes: List[List[float]] = []  # [env steps at its end, return]
    episode_times: List[float] = []  # time.monotonic() at each end (fault_run's plot)
    losses: List[float] = []
    hashes_identical = True
    lost_steps: List[str] = []  # --elastic: steps that failed
    members: set = set()  # how many learners the steps were split over
    generations: set = set()
    changes: List[List[int]] = []  # [env step, learners] each time the count changed
    ids_aligned = True
    train_seconds = 0.0
    train_steps = 0
    solved_at = None
    progress = None
    if not args.no_progress:
        from tqdm import tqdm
        progress = tqdm(total=args.max_env_steps, unit="step", mininterval=1.0)
    started = time.monotonic()
    obs, episode_return = env.reset(), 0.0
    for step in range(1, args.max_env_steps + 1):
        eps = max(args.eps_end, args.eps_start - (args.eps_start - args.eps_end) * step
                  / args.eps_steps)
        if rng.random() < eps:
            action = int(rng.integers(2))
        else:
            with torch.no_grad():
                action = int(actor(torch.from_numpy(obs)[None]).argmax())
        next_obs, reward, terminated, truncated = env.step(action)
        replay.add(encode_transition(obs, action, reward, next_obs, terminated))
        episode_return += reward
        obs = next_obs
        if terminated or truncated:
            episodes.append([step, episode_return])
            episode_times.append(time.monotonic())
            obs, episode_return = env.reset(), 0.0

        if step >= args.learning_starts and step % args.train_every == 0:
            beta = min(1.0, args.beta_start + (1 - args.beta_start) * step / args.max_env_steps)
            t0 = time.perf_counter()
            try:
                demand = learner.get_data()
                ids, data, is_weights = replay.sample(demand["batch_size"], beta)
                samples = [Sample(d, {"replay_unique_id": i, "weight": float(w)})
                           for i, d, w in zip(ids, data, is_weights)]
                info = learner.learn(samples, demand["plan_id"])["info"]
            except AggregatorError as e:
                if not args.elastic:
                    raise
                lost_steps.append(f"env step {step}: {e}")
                continue
            membership = demand.get("membership") or {}
            count = len(membership.get("members", []))
            if not changes or changes[-1][1] != count:
                changes.append([step, count])
            members.add(count)
            generations.add(membership.get("generation", 0))
            train_seconds += time.perf_counter() - t0
            train_steps += 1
            priority_info = info["priority_info"]
            if (priority_info["replay_unique_id"] != ids
                    or len(priority_info["priority"]) != len(ids)):
                ids_aligned = False
            replay.update(priority_info["replay_unique_id"], priority_info["priority"])
            losses.append(float(np.mean(as_list(info["loss"]))))
            hashes_identical &= len(set(as_list(info["weights_sha256"]))) == 1
            newest = max(as_list(info["weights_version"]))
            if newest > version:
                weights = load_checkpoint(checkpoint)
                actor.load_state_dict(weights["state_dict"])
                version = weights["version"]

        recent = [r for _, r in episodes[-args.window:]]
        mean_recent = float(np.mean(recent)) if recent else 0.0
        if progress is not None and step % 200 == 0:
            progress.update(200)
            progress.set_postfix(episodes=len(episodes), mean_return=f"{mean_recent:.0f}",
                                 loss=f"{losses[-1]:.3f}" if losses else "-", eps=f"{eps:.2f}")
        if len(recent) == args.window and mean_recent >= args.target_return:
            solved_at = step
            break
    wall = time.monotonic() - started
    if progress is not None:
        progress.close()
    closed = learner.close_task()
    final_hashes = as_list(info["weights_sha256"]) if train_steps else []
    summary = {
        "mode": "direct" if args.direct else f"address {args.address}",
        "seed": args.seed, "env_steps": step, "episodes": len(episodes),
        "solved": solved_at is not None, "steps_to_target": solved_at,
        "mean_return_last_window": mean_recent, "wall_seconds": round(wall, 2),
        "train_steps": train_steps,
        "ms_per_train_step": round(1000 * train_seconds / max(train_steps, 1), 3),
        "loss_first_50": float(np.mean(losses[:50])) if losses else None,
        "loss_last_50": float(np.mean(losses[-50:])) if losses else None,
        "ids_aligned": ids_aligned, "weights_identical_every_step": hashes_identical,
        "final_weights_sha256": final_hashes, "close_task": closed.get("message"),
        "lost_steps": lost_steps, "member_counts": sorted(members),
        "membership_generations": len(generations), "learner_changes": changes,
        "episode_returns": episodes, "episode_monotonic": episode_times,
        "started_monotonic": started,
    }
    if args.plot:
        plot(episodes, args, summary)
    return summary


def plot(episodes: List[List[float]], args: argparse.Namespace, summary: Dict[str, Any]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [s for s, _ in episodes]
    returns = [r for _, r in episodes]
    means = [np.mean(returns[max(0, i - args.window + 1):i + 1]) for i in range(len(returns))]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(steps, returns, ".", alpha=0.35, label="episode return")
    ax.plot(steps, means, "-", label=f"mean of last {args.window}")
    ax.axhline(args.target_return, color="gray", linestyle="--", label=f"{args.target_return:g}")
    changes = summary.get("learner_changes", [])[1:]  # the group changed here
    for i, (at, count) in enumerate(changes):
        ax.axvline(at, color="red", alpha=0.5)
        # Alternate sides, so changes close together stay readable.
        ax.annotate(f"{count} learners", (at, args.target_return * 1.05), color="red",
                    fontsize=8, rotation=90, va="bottom", ha="right" if i % 2 == 0 else "left")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title(f"CartPole DQN, {summary['mode']}: {summary['env_steps']} steps, "
                 f"{summary['wall_seconds']:.0f} s")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(args.plot)
    plt.close(fig)


def main() -> None:
    args = parse_args()
    summary = train(args)
    brief = {k: v for k, v in summary.items() if k not in ("episode_returns", "episode_monotonic")}
    print(json.dumps(brief, indent=2), flush=True)
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f)
    sys.exit(0 if summary["ids_aligned"] and summary["weights_identical_every_step"] else 1)


if __name__ == "__main__":
    main()
