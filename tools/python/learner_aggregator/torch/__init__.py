"""learner_aggregator.torch: PyTorch learners that follow the aggregator's membership
(the `torch` extra: pip install 'learner_aggregator[torch]').

    ElasticGroup      a gloo group re-formed when the membership changes, the state of
                      the most-trained member taken on each formation, gradients
                      averaged in one bounded collective
    Formation         what ElasticGroup.join() did
    CollectiveBound   how long a collective may take: max(1 s, 20 x p99) by default
    serve_store       hosts the TCP store ElasticGroups meet at across hosts
"""

try:
    import torch as _torch  # noqa: F401  (the extra's one dependency)
except ImportError as e:  # pragma: no cover
    raise ImportError("learner_aggregator.torch needs PyTorch: install "
                      "'learner_aggregator[torch]'") from e

from learner_aggregator.torch.bound import CollectiveBound
from learner_aggregator.torch.elastic import ElasticGroup, Formation
from learner_aggregator.torch.rendezvous import serve_store

__all__ = ["CollectiveBound", "ElasticGroup", "Formation", "serve_store"]
