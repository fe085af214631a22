"""example_learner.py: the Python twin of tools/examples/example_learner, for demos and tests.

Its Learn info matches the C++ example learner's, so both kinds can serve behind one
aggregator:
    {learner_step, learner_done: false, task_id, buffer_id, received: n,
     priority_info: {priority: [one per sample], replay_unique_id: [... or None]}}
with the same deterministic priority per sample. Fault injection: a sample whose meta
has "raise" makes learn() raise RuntimeError(<that text>).

    tools/python/run tools/python/examples/example_learner.py --listen 127.0.0.1:22300
"""

import argparse
from typing import Any, Dict, List, Optional

from learner_aggregator import Sample, serve

_FNV_OFFSET = 1469598103934665603
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1


def sample_priority(data: bytes) -> float:
    """tests/testing/example_learner_service.cc's SamplePriority: FNV-1a over the length and the
    first 64 bytes, reduced to [0, 1)."""
    h = _FNV_OFFSET ^ len(data)
    for byte in data[:64]:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return (h % 1000000) / 1e6


class ExampleLearner:
    def __init__(self, batch_size: int = 32, gpus: int = 1) -> None:
        self.batch_size = batch_size
        self.gpus = gpus
        self.learner_step = 0
        self.task_id = ""
        self.buffer_id = ""
        self.task_open = False

    def get_resource(self) -> Dict[str, int]:
        return {"gpus": self.gpus, "learners": 1}

    def start_task(self, task_info: Dict[str, Any]) -> str:
        self.task_open = True
        self.task_id = _text(task_info.get("task_id"))
        self.buffer_id = _text(task_info.get("buffer_id"))
        return f"task '{self.task_id}' started"

    def get_data(self) -> Dict[str, Any]:
        return {"batch_size": self.batch_size, "cur_learner_iter": self.learner_step,
                "task_id": self.task_id, "buffer_id": self.buffer_id}

    def learn(self, samples: List[Sample],
              membership: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        for sample in samples:
            if "raise" in sample.meta:
                raise RuntimeError(str(sample.meta["raise"]))
        self.learner_step += 1
        # The learners this step is split over, as the aggregator says (a
        # data-parallel learner would re-form its group when it changes).
        members = (membership or {}).get("members", [])
        return {
            "learner_step": self.learner_step, "learner_done": False,
            "task_id": self.task_id, "buffer_id": self.buffer_id, "received": len(samples),
            "members_seen": len(members),
            "priority_info": {
                "priority": [sample_priority(s.data) for s in samples],
                "replay_unique_id": [s.meta.get("replay_unique_id") for s in samples],
            },
        }

    def close_task(self) -> str:
        self.task_open = False
        return f"task '{self.task_id}' closed"


def _text(value: Optional[Any]) -> str:
    """A task_info field as the C++ learner reads it (numbers as their shortest text)."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:22300", help="port 0: any")
    parser.add_argument("--batch-size", type=int, default=32, help="demanded by GetData")
    parser.add_argument("--gpus", type=int, default=1, help="reported by GetResource")
    args = parser.parse_args()
    serve(ExampleLearner(args.batch_size, args.gpus), args.listen)


if __name__ == "__main__":
    main()
