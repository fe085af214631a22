"""One replica of the data-parallel DQN learner group, as an aggregatord worker:

    learner.py --listen 127.0.0.1:{port} --rank {index} --world-size N --dist-port P

Replicas join one torch.distributed gloo group over loopback (rank 0 hosts its store
on --dist-port) before serving. A replica that dies breaks the group: the others'
next all-reduce fails within --dist-timeout, their Learn fails, and the run must be
started again (gloo groups do not heal).

    learner.py --listen 127.0.0.1:{port} --elastic-id {name}-{index}

instead forms the group from the aggregator's membership and re-forms it whenever that
changes (aggregatord with on_learner_failure: shrink; see dqn.py).
"""

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dqn import DQNLearner  # noqa: E402
from learner_aggregator import serve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--dist-port", type=int, default=29500)
    parser.add_argument("--dist-timeout", type=float, default=60.0, help="seconds")
    parser.add_argument("--batch-size", type=int, default=32, help="this replica's slice")
    parser.add_argument("--elastic-id",
                        help="this learner's id in the aggregator (\"{name}-{index}\"): "
                        "form the group from the aggregator's membership, re-forming it "
                        "when that changes, instead of a fixed --world-size")
    args = parser.parse_args()

    torch.set_num_threads(1)  # deterministic, and the machine is shared
    torch.use_deterministic_algorithms(True)
    if args.elastic_id:
        serve(DQNLearner(args.batch_size, learner_id=args.elastic_id,
                         dist_timeout=args.dist_timeout), args.listen)
        return
    if args.world_size > 1:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{args.dist_port}", rank=args.rank,
            world_size=args.world_size,
            timeout=datetime.timedelta(seconds=args.dist_timeout))
    serve(DQNLearner(args.batch_size, args.rank, args.world_size), args.listen)


if __name__ == "__main__":
    main()
