"""A learner served by LearnerServer whose replicas form an ElasticGroup, for
tests/python/elastic_learn_test.py: learn() joins the Learn's membership, trains a
small network one step and all-reduces its gradients; get_data() reports its step and
the group's current collective bound and whether a learn is running. Prints "learner listening on 127.0.0.1:PORT".
argv: LEARNER_ID RENDEZVOUS_DIR."""

import sys
import threading

import torch

from learner_aggregator import LearnerServer
from learner_aggregator.torch import ElasticGroup


class ElasticLearner:
    def __init__(self, learner_id: str, directory: str) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(4, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.step = 0
        self.learning = False  # a learn is running (get_data says so)
        self.group = ElasticGroup(learner_id, rendezvous_dir=directory, timeout=30.0)
        self.group.track(modules=[self.model], optimizers=[self.optimizer],
                         counters_of=self)

    def get_resource(self):
        return {"gpus": 0}

    def get_data(self):
        return {"batch_size": 1, "cur_learner_iter": self.step,
                "extra": {"bound": self.group.bound.seconds(), "learning": self.learning}}

    def learn(self, samples, membership=None):
        self.learning = True
        try:
            return self._learn(samples, membership)
        finally:
            self.learning = False

    def _learn(self, samples, membership):
        self.group.join(membership)
        loss = self.model(torch.ones(len(samples), 4)).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.group.all_reduce_gradients(self.model)
        self.optimizer.step()
        self.step += 1
        return {"learner_step": self.step}


if __name__ == "__main__":
    torch.set_num_threads(1)
    with LearnerServer(ElasticLearner(sys.argv[1], sys.argv[2]), "127.0.0.1:0") as server:
        print(f"learner listening on 127.0.0.1:{server.port}", flush=True)
        threading.Event().wait()  # until killed
