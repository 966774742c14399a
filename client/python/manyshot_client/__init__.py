"""manyshot_client: a Python client of the manyshot inference service (manyshot.v1.ManyShot).

    import manyshot_client

    with manyshot_client.Client("127.0.0.1:50051") as client:
        client.create_task("sst2", {"input_template": "Review: {text}\\nSentiment:",
                                    "labels": ["negative", "positive"]},
                           [("a gripping film", "positive"), ("a dull mess", "negative")])
        for result in client.classify("sst2", ["a delight", "two lifeless hours"]):
            print(result.label, result.probability)

Needs grpcio and protobuf (Debian: python3-grpcio, python3-protobuf) and the stubs generated at
build time into BUILD/client/python, which must be on sys.path with client/python
(client/python/README.md says how). Errors are ManyshotError subclasses (manyshot_client.errors);
results are dataclasses (manyshot_client.results).
"""

from ._stubs import STUBS_DIR, manyshot_pb2
from .client import DEFAULT_SERVER, SERVER_ENV, TASK_METADATA, Client
from .connection import is_loopback_server
from .errors import (AlreadyExistsError, CancelledError, ConfigurationError,
                     DeadlineExceededError, FailedPreconditionError, FieldViolation,
                     InvalidArgumentError, ManyshotError, NotFoundError, PermissionDeniedError,
                     ResourceExhaustedError, UnauthenticatedError, UnavailableError,
                     UnimplementedError)
from .reflection import Reflection
from .results import (BackendInfo, CacheInfo, CandidateScore, Classification, CreateTaskResult,
                      GeneratedToken, Generation, LabelScore, Limits, ModelInfo, Progress,
                      ScoreResult, ServerInfo, Task, TaskStats)

__version__ = "0.1.0"

# The generated message classes, for callers that build requests themselves
# (manyshot_client.TaskSpec(input_template=..., labels=[...]) is accepted wherever a dict is).
TaskSpec = manyshot_pb2.TaskSpec
Demonstration = manyshot_pb2.Demonstration
Input = manyshot_pb2.Input

__all__ = [
    "Client", "DEFAULT_SERVER", "SERVER_ENV", "TASK_METADATA", "STUBS_DIR", "is_loopback_server",
    "Reflection", "manyshot_pb2", "TaskSpec", "Demonstration", "Input",
    # errors
    "ManyshotError", "ConfigurationError", "FieldViolation", "InvalidArgumentError",
    "NotFoundError", "AlreadyExistsError", "FailedPreconditionError", "ResourceExhaustedError",
    "UnauthenticatedError", "PermissionDeniedError", "UnavailableError", "DeadlineExceededError",
    "UnimplementedError", "CancelledError",
    # results
    "Progress", "TaskStats", "Task", "CreateTaskResult", "LabelScore", "Classification",
    "CandidateScore", "ScoreResult", "GeneratedToken", "Generation", "ModelInfo", "BackendInfo",
    "CacheInfo", "Limits", "ServerInfo",
]
