"""What the client's methods return: plain dataclasses made from the manyshot.v1 responses.

Field names are the proto's (proto/manyshot/v1/manyshot.proto documents each). Enums are given as
their names without the enum's prefix: a Task's state is "READY", not TASK_STATE_READY; a
Generation's finish_reason "MAX_TOKENS". Timestamps are timezone-aware datetimes. Every result
also keeps the protobuf message it was made from in `raw` (not compared, not printed), for fields
added to the API after this package.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ._stubs import json_format, manyshot_pb2


def enum_short_name(enum_type, number: int) -> str:
    """The name of value `number` of `enum_type` (a protobuf enum wrapper or descriptor) without
    the prefix its UNSPECIFIED value shares, e.g. "READY" for TASK_STATE_READY."""
    descriptor = getattr(enum_type, "DESCRIPTOR", enum_type)
    value = descriptor.values_by_number.get(number)
    if value is None:
        return str(number)
    zero = descriptor.values_by_number.get(0)
    prefix = ""
    if zero is not None and zero.name.endswith("UNSPECIFIED"):
        prefix = zero.name[:-len("UNSPECIFIED")]
    return value.name[len(prefix):] if value.name.startswith(prefix) else value.name


def _time(message, name: str) -> Optional[datetime.datetime]:
    if not message.HasField(name):
        return None
    return getattr(message, name).ToDatetime(tzinfo=datetime.timezone.utc)


def _scalars(cls, message, **overrides):
    """An instance of dataclass `cls` whose fields are copied by name from `message`."""
    values = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in overrides:
            values[f.name] = overrides[f.name]
        elif f.name == "raw":
            values[f.name] = message
        else:
            values[f.name] = getattr(message, f.name)
    return cls(**values)


def _raw():
    return field(default=None, repr=False, compare=False)


# --- Tasks -----------------------------------------------------------------------------------


@dataclass
class Progress:
    """One CreateTask progress event. phase: RECEIVING, TOKENIZING, ENCODING or STORING."""
    phase: str
    demonstrations_received: int
    groups_total: int
    groups_encoded: int
    tokens_encoded: int
    elapsed_seconds: float
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.CreateTaskProgress) -> "Progress":
        return _scalars(cls, message, phase=enum_short_name(
            manyshot_pb2.CreateTaskProgress.Phase, message.phase))


@dataclass
class TaskStats:
    """A task's figures (TaskStats). tiers: "MEMORY" and/or "DISK"."""
    demonstrations: int
    groups: int
    context_tokens: int
    group_length: int
    demonstrations_per_group: List[int]
    truncated_demonstrations: int
    cache_bytes: int
    tiers: List[str]
    encode_seconds: float
    effective_rescale_factor: float
    cache_holds: str
    segment_length: int
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.TaskStats) -> "TaskStats":
        return _scalars(cls, message,
                        demonstrations_per_group=list(message.demonstrations_per_group),
                        tiers=[enum_short_name(manyshot_pb2.CacheTier, t) for t in message.tiers])


@dataclass
class Task:
    """A registered task. state: ENCODING, READY or FAILED (then `error` says why). spec is the
    TaskSpec as a dict (proto field names, enums by full name), which create_task accepts back."""
    task_id: str
    state: str
    spec: Dict[str, Any]
    stats: TaskStats
    content_hash: str
    create_time: Optional[datetime.datetime]
    error: str
    replacing: bool
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.Task) -> "Task":
        return _scalars(
            cls, message, state=enum_short_name(manyshot_pb2.TaskState, message.state),
            spec=json_format.MessageToDict(message.spec, preserving_proto_field_name=True),
            stats=TaskStats.from_proto(message.stats), create_time=_time(message, "create_time"))


@dataclass
class CreateTaskResult:
    """The end of CreateTask: the task as stored; created is False when the same content was
    already registered under this id (nothing was encoded); replaced when replace=True replaced
    different content."""
    task: Task
    created: bool
    replaced: bool
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.CreateTaskResult) -> "CreateTaskResult":
        return _scalars(cls, message, task=Task.from_proto(message.task))


# --- Queries ---------------------------------------------------------------------------------


@dataclass
class LabelScore:
    """How one label scored for one input."""
    label: str
    mean_logprob: float
    sum_logprob: float
    num_tokens: int
    probability: float
    calibrated_probability: float
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.LabelScore) -> "LabelScore":
        return _scalars(cls, message)


@dataclass
class Classification:
    """The answer for one input.

    label / label_index: the winning label (calibrated when the task calibrates).
    probabilities: label -> probability (softmax over the labels' mean log-probabilities), in
        label-index order; calibrated_probabilities likewise when the task calibrates, else None.
    scores: every label's LabelScore, in label-index order.
    index: the input's position in the request (classify) or in the input stream
        (stream_classify).
    truncated_tokens: tokens the input's truncation removed to fit the task's room (0: none).
    """
    label: str
    label_index: int
    probabilities: Dict[str, float]
    calibrated_probabilities: Optional[Dict[str, float]]
    scores: List[LabelScore]
    raw_label_index: int
    input_tokens: int
    truncated_tokens: int
    index: int
    raw: Any = _raw()

    @property
    def probability(self) -> float:
        """The winning label's probability (calibrated when the task calibrates)."""
        chosen = self.calibrated_probabilities or self.probabilities
        return chosen.get(self.label, 0.0)

    @classmethod
    def from_proto(cls, message: manyshot_pb2.ClassifyResult, index: int) -> "Classification":
        scores = [LabelScore.from_proto(s) for s in message.scores]
        calibrated = None
        if any(s.calibrated_probability for s in scores):
            calibrated = {s.label: s.calibrated_probability for s in scores}
        return _scalars(cls, message, scores=scores,
                        probabilities={s.label: s.probability for s in scores},
                        calibrated_probabilities=calibrated, index=index)


@dataclass
class CandidateScore:
    """How one candidate answer scored."""
    candidate: str
    mean_logprob: float
    sum_logprob: float
    num_tokens: int
    probability: float
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.CandidateScore) -> "CandidateScore":
        return _scalars(cls, message)


@dataclass
class ScoreResult:
    """The candidates of one Score item, in the given order; best_index is the winner's.
    truncated_tokens: tokens the input's truncation removed to fit the task's room (0: none)."""
    candidates: List[CandidateScore]
    best_index: int
    truncated_tokens: int
    raw: Any = _raw()

    @property
    def best(self) -> str:
        """The winning candidate's text."""
        return self.candidates[self.best_index].candidate if self.candidates else ""

    @classmethod
    def from_proto(cls, message: manyshot_pb2.ScoreResult) -> "ScoreResult":
        return _scalars(cls, message,
                        candidates=[CandidateScore.from_proto(c) for c in message.candidates])


@dataclass
class GeneratedToken:
    """One streamed token of Generate (its text may be empty inside a multi-byte character)."""
    token_id: int
    text: str
    logprob: float
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.GeneratedToken) -> "GeneratedToken":
        return _scalars(cls, message)


@dataclass
class Generation:
    """Generate's result. finish_reason: EOS, STOP_STRING or MAX_TOKENS. tokens: the streamed
    tokens as they arrived. truncated_input_tokens: tokens the input's truncation removed."""
    text: str
    token_ids: List[int]
    finish_reason: str
    sum_logprob: float
    score: float
    truncated_input_tokens: int
    tokens: List[GeneratedToken]
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.GenerationResult,
                   tokens: List[GeneratedToken]) -> "Generation":
        return _scalars(cls, message, token_ids=list(message.token_ids), tokens=tokens,
                        finish_reason=enum_short_name(manyshot_pb2.FinishReason,
                                                      message.finish_reason))


# --- Server information ----------------------------------------------------------------------


@dataclass
class ModelInfo:
    """The served model (ModelInfo)."""
    path: str
    model_type: str
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    fingerprint: str
    random_weights: bool
    tokenizer_kind: str
    tokenizer_fingerprint: str
    weight_dtype: str
    encoder_decoder: bool
    weights_note: str
    held_weight_dtype: str
    raw: Any = _raw()


@dataclass
class BackendInfo:
    """The compute backend (BackendInfo)."""
    name: str
    device: str
    threads: int
    blas_kernel: str
    description: str
    selection: str
    compute_dtype: str
    kv_dtype: str
    cuda_built: bool
    device_index: int
    raw: Any = _raw()


@dataclass
class CacheInfo:
    """The KV cache's tiers (CacheInfo)."""
    memory_bytes: int
    memory_budget_bytes: int
    memory_entries: int
    disk_bytes: int
    disk_budget_bytes: int
    disk_entries: int
    kv_dtype: str
    raw: Any = _raw()


@dataclass
class Limits:
    """The server's limits (Limits)."""
    max_demonstrations: int
    max_input_bytes: int
    max_batch_inputs: int
    max_candidates: int
    max_new_tokens: int
    max_beam_width: int
    max_message_bytes: int
    max_tasks: int
    max_stream_inflight: int
    max_server_inflight: int
    max_upload_bytes: int
    max_total_upload_bytes: int
    max_request_id_bytes: int
    max_query_context_tokens: int
    max_streams_per_tenant: int
    max_streams_per_connection: int
    stream_idle_timeout_seconds: int
    raw: Any = _raw()


@dataclass
class ServerInfo:
    """GetServerInfo: the server's version, model, backend, cache, limits and task count."""
    version: str
    model: ModelInfo
    backend: BackendInfo
    cache: CacheInfo
    limits: Limits
    tasks: int
    start_time: Optional[datetime.datetime]
    raw: Any = _raw()

    @classmethod
    def from_proto(cls, message: manyshot_pb2.ServerInfo) -> "ServerInfo":
        return _scalars(cls, message, model=_scalars(ModelInfo, message.model),
                        backend=_scalars(BackendInfo, message.backend),
                        cache=_scalars(CacheInfo, message.cache),
                        limits=_scalars(Limits, message.limits),
                        start_time=_time(message, "start_time"))
