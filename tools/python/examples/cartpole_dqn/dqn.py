"""The DQN learner (double DQN, a target network, Adam, importance-weighted Huber loss)
as a learner_aggregator learner, for one replica of a data-parallel group.

Each replica trains on its slice of the batch; with world_size > 1 the gradients are
averaged with torch.distributed (gloo) before the step, so every replica applies the
same update and the weights stay bit-identical (reported as weights_sha256). Rank 0
shares the weights the way DI-engine learners do: a checkpoint file named in
task_info, rewritten every `weights_every` steps, whose version (the learner step) is
the Learn info's weights_version.

Elastic (a learner_id given): the group is a learner_aggregator.torch.ElasticGroup,
formed from the aggregator's membership instead of a fixed world and re-formed when a
Learn carries a new generation; each formation brings every replica to the state
(weights, target network, Adam moments, step, weights version) of the one that trained
longest, so a restarted replica catches up and all stay bit-identical. The groups
rendezvous through files beside the task's checkpoint. An all-reduce that breaks (a
member died) or outlasts its bound (a member hangs) fails that step with ABORTED (the
aggregator does not hold it against the survivors); the next step comes with the
smaller membership.

Samples: `data` is encode_arrays({"transition": <one TRANSITION record>}); meta has
replay_unique_id (echoed) and weight (the importance-sampling weight).
"""

from __future__ import annotations

import functools
import hashlib
import os
from typing import Any, Dict, List, Optional

import grpc
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from learner_aggregator import LearnerError, Sample, decode_arrays, encode_arrays
from learner_aggregator.torch import ElasticGroup

# One transition, as one structured array: a single npz member decodes fastest.
TRANSITION = np.dtype([("obs", np.float32, 4), ("action", np.int64), ("reward", np.float32),
                       ("next_obs", np.float32, 4), ("done", np.bool_)])


def make_q_network(hidden: int = 128) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, 2))


def state_sha256(module: torch.nn.Module) -> str:
    """A hash of the exact bytes of every tensor of the state dict, in order."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def save_checkpoint(path: str, module: torch.nn.Module, version: int) -> None:
    """Writes {"version", "state_dict"} atomically (readers never see half a file)."""
    temp = f"{path}.tmp.{os.getpid()}"
    torch.save({"version": version, "state_dict": module.state_dict()}, temp)
    os.replace(temp, path)


def load_checkpoint(path: str) -> Dict[str, Any]:
    return torch.load(path, weights_only=True)


@functools.lru_cache(maxsize=1 << 17)
def _transition_bytes(data: bytes) -> bytes:
    """The raw TRANSITION record in a sample's npz bytes. A replayed transition comes
    back many times and an npz costs ~0.3 ms to parse here: memoized by the
    (immutable) sample bytes."""
    record = decode_arrays(data)["transition"]
    if record.dtype != TRANSITION or record.shape != ():
        raise ValueError(f"a transition of dtype {record.dtype} and shape {record.shape}, "
                         f"expected one {TRANSITION}")
    return record.tobytes()


def encode_transition(obs, action: int, reward: float, next_obs, done: bool) -> bytes:
    record = np.array((obs, action, reward, next_obs, done), dtype=TRANSITION)
    return encode_arrays({"transition": record})


class DQNLearner:
    """One replica. Hyperparameters arrive in start_task's task_info (the coordinator
    owns the experiment): seed, lr, gamma, target_update, hidden, checkpoint,
    weights_every, task_id, buffer_id."""

    def __init__(self, batch_size: int, rank: int = 0, world_size: int = 1,
                 learner_id: Optional[str] = None, dist_timeout: float = 60.0) -> None:
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.learner_id = learner_id  # set: elastic
        self.dist_timeout = dist_timeout
        self.group: Optional[ElasticGroup] = None  # elastic: made by start_task
        self.q: Optional[torch.nn.Module] = None
        self.step = 0
        self.task: Dict[str, Any] = {}

    def get_resource(self) -> Dict[str, int]:
        return {"gpus": 0, "learners": 1}

    def start_task(self, info: Dict[str, Any]) -> str:
        if self.q is not None and info == self.task:
            # The aggregator replays the open task to a learner that comes back (its
            # connection dropped, e.g. by the keepalive while the process was stopped):
            # the same task (the checkpoint path is the run's own) keeps what this replica
            # trained. Starting over would lose the run's state if the other replicas
            # were lost meanwhile, and write an older weights version.
            return (f"replica {self.rank}/{self.world_size} already on this task, at step "
                    f"{self.step}, weights {state_sha256(self.q)[:12]}")
        torch.manual_seed(int(info.get("seed", 0)))  # the same initial weights everywhere
        self.task = info
        self.q = make_q_network(int(info.get("hidden", 128)))
        self.target = make_q_network(int(info.get("hidden", 128)))
        self.target.load_state_dict(self.q.state_dict())
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=float(info.get("lr", 1e-3)))
        self.gamma = float(info.get("gamma", 0.99))
        self.target_update = int(info.get("target_update", 500))
        self.weights_every = int(info.get("weights_every", 1))
        self.checkpoint = info.get("checkpoint")
        self.step = 0
        self.weights_version = 0
        if self.learner_id is not None:
            if self.group is not None:
                self.group.leave()
            self.group = ElasticGroup(self.learner_id,
                                      rendezvous_dir=os.path.dirname(str(self.checkpoint)),
                                      timeout=self.dist_timeout)
            self.group.track(modules=[self.q, self.target], optimizers=[self.optimizer],
                             counters_of=self, counters=["step", "weights_version"])
        self._share_weights()
        return f"replica {self.rank}/{self.world_size} ready, weights {state_sha256(self.q)[:12]}"

    def get_data(self) -> Dict[str, Any]:
        return {"batch_size": self.batch_size, "cur_learner_iter": self.step,
                "task_id": str(self.task.get("task_id", "")),
                "buffer_id": str(self.task.get("buffer_id", ""))}

    def learn(self, samples: List[Sample],
              membership: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        if self.q is None:
            raise LearnerError(grpc.StatusCode.FAILED_PRECONDITION, "learn before start_task")
        if self.group is not None:
            formation = self.group.join(membership)
            if formation is not None:
                self.rank, self.world_size = formation.rank, formation.world_size
                print(f"replica {self.learner_id}: group generation {formation.generation}, "
                      f"rank {self.rank} of {self.world_size}, at step {self.step}, weights "
                      f"{state_sha256(self.q)[:12]}", flush=True)
        batch = np.frombuffer(b"".join(_transition_bytes(s.data) for s in samples), TRANSITION)
        weights = torch.tensor([float(s.meta.get("weight", 1.0)) for s in samples])
        obs, next_obs, action, reward = (
            torch.from_numpy(np.ascontiguousarray(batch[field]))  # fields are strided views
            for field in ("obs", "next_obs", "action", "reward"))
        done = torch.from_numpy(batch["done"].astype(np.float32))

        q = self.q(obs).gather(1, action[:, None]).squeeze(1)
        with torch.no_grad():  # double DQN: the online net picks, the target net values
            next_action = self.q(next_obs).argmax(1, keepdim=True)
            next_q = self.target(next_obs).gather(1, next_action).squeeze(1)
            target = reward + self.gamma * (1.0 - done) * next_q
        td = target - q
        loss = (weights * F.smooth_l1_loss(q, target, reduction="none")).mean()
        self.optimizer.zero_grad()
        loss.backward()
        if self.group is not None:
            self.group.all_reduce_gradients(self.q)  # LearnerError(ABORTED) if it broke
        else:
            self._average_gradients()
        torch.nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
        self.optimizer.step()
        self.step += 1
        if self.step % self.target_update == 0:
            self.target.load_state_dict(self.q.state_dict())
        if self.step % self.weights_every == 0:
            self._share_weights()
        return {
            "learner_step": self.step, "learner_done": False,
            "task_id": str(self.task.get("task_id", "")),
            "buffer_id": str(self.task.get("buffer_id", "")),
            "loss": float(loss), "weights_version": self.weights_version,
            "weights_sha256": state_sha256(self.q),
            "priority_info": {
                "priority": td.abs().detach().tolist(),
                "replay_unique_id": [s.meta.get("replay_unique_id") for s in samples],
            },
        }

    def close_task(self) -> str:
        message = (f"replica {self.rank} closed at step {self.step}, "
                   f"weights sha256 {state_sha256(self.q)}")
        print(message, flush=True)  # in the daemon's log, per replica
        return message

    def _average_gradients(self) -> None:
        """The static group's (learner.py --world-size): one all-reduce for all."""
        if self.world_size == 1:
            return
        grads = [p.grad for p in self.q.parameters()]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)  # one call for all parameters
        flat /= self.world_size
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def _share_weights(self) -> None:
        self.weights_version = self.step
        if self.group is not None and self.group.generation is None:
            # No group yet: the first replica to start the task writes the initial
            # weights; one that rejoins later (its task replayed) writes nothing.
            writes = not os.path.exists(str(self.checkpoint))
        else:
            writes = self.rank == 0
        if writes and self.checkpoint:
            save_checkpoint(str(self.checkpoint), self.q, self.step)
