"""One member of an ElasticGroup for tests/python/elastic_group_test.py, driven by
lines on stdin, answering one JSON line each:
    join GENERATION ID,ID,...   -> {"formation": {...}} or null (unchanged)
    train N                     -> {"step", "hash"} after N steps
    state                       -> {"step", "hash", "extra", "bound"}
A LearnerError is answered {"error": CODE, "message", "after": seconds}.
argv: LEARNER_ID SEED (--dir DIR | --store HOST:PORT) [--collective-bound S]."""

import argparse
import hashlib
import json
import sys
import time

import torch

from learner_aggregator import LearnerError
from learner_aggregator.torch import ElasticGroup


class Member:
    def __init__(self, args: argparse.Namespace) -> None:
        torch.manual_seed(args.seed)  # different weights per member until they form
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                         torch.nn.Linear(8, 2))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.step = 0
        self.extra = {"seed": args.seed}
        self.group = ElasticGroup(args.learner_id, rendezvous_dir=args.dir,
                                  store_address=args.store, timeout=args.timeout,
                                  collective_bound=args.collective_bound)
        self.group.track(modules=[self.model], optimizers=[self.optimizer], counters_of=self,
                         counters=["step"], save_extra=lambda: dict(self.extra),
                         load_extra=self.extra.update)

    def hash(self) -> str:
        digest = hashlib.sha256()
        for tensor in self.model.state_dict().values():
            digest.update(tensor.numpy().tobytes())
        return digest.hexdigest()

    def train(self, steps: int) -> dict:
        for _ in range(steps):
            # Each member its own data (by rank): only averaged gradients keep them equal.
            g = torch.Generator().manual_seed(1000 * self.step + self.group.rank)
            x = torch.randn(16, 4, generator=g)
            loss = self.model(x).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.group.all_reduce_gradients(self.model)
            self.optimizer.step()
            self.step += 1
        return {"step": self.step, "hash": self.hash()}

    def handle(self, words: list) -> object:
        if words[0] == "join":
            formation = self.group.join({"generation": int(words[1]),
                                         "members": words[2].split(",")})
            return formation and {"formation": formation.__dict__}
        if words[0] == "train":
            return self.train(int(words[1]))
        return {"step": self.step, "hash": self.hash(), "extra": self.extra,
                "bound": self.group.bound.seconds()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("learner_id")
    parser.add_argument("seed", type=int)
    parser.add_argument("--dir")
    parser.add_argument("--store")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--collective-bound", type=float)
    member = Member(parser.parse_args())
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        started = time.monotonic()
        try:
            answer = member.handle(line.split())
        except LearnerError as e:
            answer = {"error": e.code.name, "message": e.message,
                      "after": time.monotonic() - started}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
