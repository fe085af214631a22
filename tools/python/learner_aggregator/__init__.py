"""learner_aggregator: Python learners, coordinators and workers for aggregatord.

    LearnerServer, serve      serve a Python learner object as the Learner API
    AggregatorClient          call an aggregator (or any learner) from a coordinator
    Sample, encode_arrays, decode_arrays   samples and numpy arrays in their bytes
    LearnerAggregatorError                 the root of the SDK's errors; beneath it
      LearnerError, AggregatorError        errors on the two sides (AggregatorError's
                                           failed_learners: FailedLearner each)
    Learner                                the Protocol LearnerServer serves
    DataDemand, LearnResult, Membership, Resource, TaskReply   the replies' shapes
    learner_aggregator.worker              run_worker(): a supervised worker process

Installed from the wheel (tools/python/build_wheel), or in a checkout through
tools/python/run.
"""

# The release, as aggregatord's (lib/base/version.h); the wheel takes it from here.
__version__ = "0.1.0"

from learner_aggregator.client import AggregatorClient
from learner_aggregator.errors import (AggregatorError, FailedLearner, LearnerAggregatorError,
                                      LearnerError)
from learner_aggregator.learner import (DataDemand, Learner, LearnResult, Membership,
                                        Resource, TaskReply)
from learner_aggregator.samples import Sample, decode_arrays, encode_arrays
from learner_aggregator.server import LearnerServer, serve

__all__ = [
    "__version__", "AggregatorClient", "AggregatorError", "DataDemand", "FailedLearner", "Learner",
    "LearnerAggregatorError", "LearnerError", "LearnerServer", "LearnResult", "Membership",
    "Resource", "Sample", "TaskReply", "decode_arrays", "encode_arrays", "serve",
]
