"""manyshot_client.Client: the manyshot.v1.ManyShot service (and gRPC health) from Python."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import connection
from ._stubs import grpc, health_pb2, health_pb2_grpc, json_format, manyshot_pb2, manyshot_pb2_grpc
from .errors import ConfigurationError, ManyshotError, error_from_rpc_error, error_from_rpc_status
from .results import (Classification, CreateTaskResult, GeneratedToken, Generation, Progress,
                      ScoreResult, ServerInfo, Task, enum_short_name)

DEFAULT_SERVER = "127.0.0.1:50051"
SERVER_ENV = "MANYSHOT_SERVER"
TASK_METADATA = "x-manyshot-task"  # routes per-task calls through a task-affinity proxy

# An input: its text, a mapping of placeholder -> value ({"premise": ..., "hypothesis": ...}), a
# mapping {"text": ..., "fields": {...}} (the proto's Input), or a manyshot_pb2.Input.
InputLike = Union[str, Mapping, "manyshot_pb2.Input"]
# A demonstration: (input, answer) where answer is the label text (str) or its index (int); a
# mapping {"text"/"fields"/placeholders..., "label" or "label_index"}; or a
# manyshot_pb2.Demonstration.
DemonstrationLike = Union[Tuple[Any, Union[str, int]], Mapping, "manyshot_pb2.Demonstration"]
# A Score item: (input, candidates), a mapping {"input": ..., "candidates": [...]} (or the input's
# own keys beside "candidates"), or a manyshot_pb2.ScoreItem.
ScoreItemLike = Union[Tuple[Any, Sequence[str]], Mapping, "manyshot_pb2.ScoreItem"]

_UNSET: Any = object()
_INPUT_KEYS = {"text", "fields"}
_ANSWER_KEYS = {"label", "label_index"}


# --- Requests from plain Python values -------------------------------------------------------


def _enum_value(enum, value, where: str):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigurationError(f"{where}: expected an {enum.name} name or number, got {value!r}")
    if isinstance(value, int) or value in enum.values_by_name:
        return value
    zero = enum.values_by_number.get(0)
    prefix = zero.name[:-len("UNSPECIFIED")] if zero and zero.name.endswith("UNSPECIFIED") else ""
    name = prefix + value.upper()
    if name in enum.values_by_name:
        return name
    choices = ", ".join(enum_short_name(enum, v.number).lower() for v in enum.values
                        if v.number != 0)
    raise ConfigurationError(f"{where}: {value!r} is not an {enum.name} (one of {choices})")


def _normalized(descriptor, value: Mapping, where: str) -> Dict[str, Any]:
    """`value` with enum names shortened by the user ("structured") made full ("MODE_STRUCTURED")
    and None values dropped, checked against `descriptor`'s field names."""
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where}: expected a mapping for {descriptor.full_name}, "
                                 f"got {type(value).__name__}")
    out = {}
    for key, item in value.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            field = next((f for f in descriptor.fields if f.json_name == key), None)
        if field is None:
            raise ConfigurationError(
                f"{where}: {descriptor.full_name} has no field {key!r} (fields: "
                f"{', '.join(f.name for f in descriptor.fields)})")
        if item is None:
            continue
        path = f"{where}.{field.name}"
        repeated = field.label == field.LABEL_REPEATED
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[key] = item
        elif field.message_type is not None:
            def convert(x, p):
                if hasattr(x, "DESCRIPTOR"):
                    x = json_format.MessageToDict(x, preserving_proto_field_name=True)
                return _normalized(field.message_type, x, p)
            out[key] = ([convert(x, f"{path}[{i}]") for i, x in enumerate(item)] if repeated
                        else convert(item, path))
        elif field.enum_type is not None:
            out[key] = ([_enum_value(field.enum_type, x, f"{path}[{i}]")
                         for i, x in enumerate(item)] if repeated
                        else _enum_value(field.enum_type, item, path))
        else:
            out[key] = item
    return out


def _message(cls, value, where: str):
    """A `cls` message from `value`: a `cls` itself, or a dict of its fields (proto names)."""
    if isinstance(value, cls):
        return value
    message = cls()
    try:
        json_format.ParseDict(_normalized(cls.DESCRIPTOR, value, where), message)
    except json_format.ParseError as error:
        raise ConfigurationError(f"{where}: {error}") from None
    return message


def _input(value: InputLike, where: str) -> "manyshot_pb2.Input":
    if isinstance(value, manyshot_pb2.Input):
        return value
    if isinstance(value, str):
        return manyshot_pb2.Input(text=value)
    if isinstance(value, Mapping):
        if set(value) <= _INPUT_KEYS:
            return _message(manyshot_pb2.Input, value, where)
        return _message(manyshot_pb2.Input, {"fields": dict(value)}, where)
    raise ConfigurationError(f"{where}: an input is a str, a mapping or a manyshot_pb2.Input, "
                             f"not {type(value).__name__}")


def _inputs(values, where: str) -> List["manyshot_pb2.Input"]:
    if isinstance(values, (str, Mapping, manyshot_pb2.Input)):
        values = [values]
    return [_input(v, f"{where}[{i}]") for i, v in enumerate(values)]


def _answer(demonstration, answer, where: str) -> None:
    if isinstance(answer, bool) or not isinstance(answer, (str, int)):
        raise ConfigurationError(f"{where}: the answer is a label (str) or a label index (int), "
                                 f"not {answer!r}")
    if isinstance(answer, str):
        demonstration.label = answer
    else:
        demonstration.label_index = answer


def _demonstration(value: DemonstrationLike, where: str) -> "manyshot_pb2.Demonstration":
    if isinstance(value, manyshot_pb2.Demonstration):
        return value
    demonstration = manyshot_pb2.Demonstration()
    if isinstance(value, Mapping):
        answers = [key for key in _ANSWER_KEYS if key in value]
        if len(answers) != 1:
            raise ConfigurationError(f"{where}: give exactly one of label and label_index")
        rest = {k: v for k, v in value.items() if k not in _ANSWER_KEYS}
        given = _input(rest, where) if rest else manyshot_pb2.Input()
        _answer(demonstration, value[answers[0]], f"{where}.{answers[0]}")
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        given = _input(value[0], f"{where}[0]")
        _answer(demonstration, value[1], f"{where}[1]")
    else:
        raise ConfigurationError(f"{where}: a demonstration is (input, label), a mapping or a "
                                 f"manyshot_pb2.Demonstration, not {value!r}")
    demonstration.text = given.text
    demonstration.fields.update(given.fields)
    return demonstration


def _score_item(value: ScoreItemLike, where: str) -> "manyshot_pb2.ScoreItem":
    if isinstance(value, manyshot_pb2.ScoreItem):
        return value
    if isinstance(value, Mapping):
        if "candidates" not in value:
            raise ConfigurationError(f"{where}: a Score item needs candidates")
        candidates = value["candidates"]
        rest = {k: v for k, v in value.items() if k != "candidates"}
        given = rest["input"] if set(rest) == {"input"} else rest
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        given, candidates = value
    else:
        raise ConfigurationError(f"{where}: a Score item is (input, candidates), a mapping or a "
                                 f"manyshot_pb2.ScoreItem, not {value!r}")
    if isinstance(candidates, str) or not all(isinstance(c, str) for c in candidates):
        raise ConfigurationError(f"{where}: candidates are a list of strings")
    return manyshot_pb2.ScoreItem(input=_input(given, f"{where}.input"),
                                  candidates=list(candidates))


def _query_options(options: Mapping[str, Any], where: str = "options"):
    """QueryOptions from keyword arguments named after its fields (mode, rescale_factor, ...)."""
    return _message(manyshot_pb2.QueryOptions,
                    {k: v for k, v in options.items() if v is not None}, where)


class _Requests:
    """The request iterator of a client-streaming call. An exception raised while making a
    request (a bad demonstration or input) cancels the call instead of half-closing the stream,
    which would make the server act on what was sent so far; `error` keeps it for the caller."""

    def __init__(self, generator: Iterator[Any]) -> None:
        self._generator = generator
        self._call = None
        self._attached = threading.Event()
        self.error: Optional[BaseException] = None

    def attach(self, call) -> None:
        self._call = call
        self._attached.set()

    def __iter__(self) -> "_Requests":
        return self

    def __next__(self):
        try:
            return next(self._generator)
        except StopIteration:
            raise
        except Exception as error:  # handed to the caller's thread below
            self.error = error
            self._attached.wait(60)
            if self._call is not None:
                self._call.cancel()
            raise StopIteration from None


# --- The client ------------------------------------------------------------------------------


class Client:
    """A connection to a manyshot server.

    Args:
        server: a gRPC target, "host:port" (default: $MANYSHOT_SERVER, else 127.0.0.1:50051).
        tls_ca_file: PEM CA bundle; connects with TLS when given.
        tls_cert_file, tls_key_file: a client certificate and key for mutual TLS (together, and
            only with tls_ca_file).
        tls_server_name: the name expected in the server's certificate, when it is not the host.
        token, token_file: a bearer token (or a file holding one), sent as
            `authorization: Bearer TOKEN`. Without TLS it is only sent to loopback servers;
            otherwise the constructor raises ConfigurationError.
        timeout: default deadline in seconds of every call (None: no deadline); each method's
            own `timeout` overrides it.
        channel_options: extra gRPC channel arguments, e.g. [("grpc.max_send_message_length",
            64 << 20)].

    Every failed call raises a ManyshotError (see manyshot_client.errors). Use as a context
    manager, or call close().
    """

    def __init__(self, server: Optional[str] = None, *, tls_ca_file: Optional[str] = None,
                 tls_cert_file: Optional[str] = None, tls_key_file: Optional[str] = None,
                 tls_server_name: Optional[str] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None, timeout: Optional[float] = None,
                 channel_options: Sequence[Tuple[str, Any]] = ()) -> None:
        self.server = server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER
        self.timeout = timeout
        connection.check_tls_arguments(tls_ca_file, tls_cert_file, tls_key_file, tls_server_name)
        self._token = connection.resolve_token(self.server, bool(tls_ca_file), token, token_file)
        options = [("grpc.max_receive_message_length", -1), *channel_options]
        self.channel, self.tls = connection.make_channel(
            self.server, tls_ca_file=tls_ca_file, tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file, tls_server_name=tls_server_name, options=options)
        self._stub = manyshot_pb2_grpc.ManyShotStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def __repr__(self) -> str:
        return (f"Client({self.server!r}, tls={self.tls}, token={'yes' if self._token else 'no'})")

    def close(self) -> None:
        """Closes the channel; calls in flight are cancelled."""
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- plumbing --

    def metadata(self, task_id: Optional[str] = None) -> List[Tuple[str, str]]:
        """The call metadata: the bearer token and, for a per-task call, x-manyshot-task."""
        metadata = []
        if self._token:
            metadata.append(("authorization", f"Bearer {self._token}"))
        if task_id:
            metadata.append((TASK_METADATA, task_id))
        return metadata

    def _timeout(self, timeout):
        return self.timeout if timeout is _UNSET else timeout

    def _unary(self, method, request, task_id, timeout):
        try:
            return method(request, timeout=self._timeout(timeout), metadata=self.metadata(task_id))
        except grpc.RpcError as error:
            raise error_from_rpc_error(error) from None

    # -- health and server information --

    def health(self, service: str = "", *, timeout: Optional[float] = _UNSET) -> str:
        """grpc.health.v1.Health/Check of `service` ("" is the server as a whole,
        "manyshot.v1.ManyShot" the API): "SERVING" or "NOT_SERVING" (a draining server).
        An unknown service raises NotFoundError."""
        response = self._unary(self._health.Check,
                               health_pb2.HealthCheckRequest(service=service), None, timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def server_info(self, *, timeout: Optional[float] = _UNSET) -> ServerInfo:
        """The model, backend, cache and limits of the server (GetServerInfo)."""
        return ServerInfo.from_proto(self._unary(
            self._stub.GetServerInfo, manyshot_pb2.GetServerInfoRequest(), None, timeout))

    def reflection(self):
        """The server's reflection service (manyshot_client.reflection.Reflection)."""
        from .reflection import Reflection
        return Reflection(self)

    # -- tasks --

    def create_task(self, task_id: str, spec: Union[Mapping[str, Any], "manyshot_pb2.TaskSpec"],
                    demonstrations: Iterable[DemonstrationLike] = (), *, replace: bool = False,
                    chunk: int = 1000, chunk_bytes: int = 1 << 20,
                    on_progress: Optional[Callable[[Progress], None]] = None,
                    timeout: Optional[float] = _UNSET) -> CreateTaskResult:
        """Registers task `task_id` and waits until it is encoded (CreateTask).

        spec: a TaskSpec as a dict of its fields (enums by name, short names allowed:
            {"input_template": "Review: {text}\\nSentiment:", "labels": ["negative", "positive"],
            "mode": "structured"}) or a manyshot_pb2.TaskSpec.
        demonstrations: any iterable (read lazily) of (input, label) tuples (label text or
            label index), mappings ({"text": ..., "label": ...}, {"premise": ..., "hypothesis":
            ..., "label_index": 1}) or manyshot_pb2.Demonstration. Sent in messages of at most
            `chunk` demonstrations and about `chunk_bytes` bytes.
        replace: replace an existing task of this id whose content differs (else such a task
            makes the call fail with AlreadyExistsError).
        on_progress: called with each Progress event the server streams.

        Returns the CreateTaskResult; created is False when the same content was already there.
        """
        if chunk < 1:
            raise ConfigurationError("chunk must be at least 1")
        first = manyshot_pb2.CreateTaskRequest(
            task_id=task_id, spec=_message(manyshot_pb2.TaskSpec, spec, "spec"), replace=replace)

        def requests():
            message, count, size = first, 0, 0
            for i, value in enumerate(demonstrations):
                demonstration = _demonstration(value, f"demonstrations[{i}]")
                bytes_ = demonstration.ByteSize()
                if count >= chunk or (count and size + bytes_ > chunk_bytes):
                    yield message
                    message, count, size = manyshot_pb2.CreateTaskRequest(), 0, 0
                message.demonstrations.append(demonstration)
                count, size = count + 1, size + bytes_
            yield message

        stream = _Requests(requests())
        call = self._stub.CreateTask(stream, timeout=self._timeout(timeout),
                                     metadata=self.metadata(task_id))
        stream.attach(call)
        result = None
        try:
            for response in call:
                event = response.WhichOneof("event")
                if event == "progress" and on_progress is not None:
                    on_progress(Progress.from_proto(response.progress))
                elif event == "result":
                    result = CreateTaskResult.from_proto(response.result)
        except grpc.RpcError as error:
            if stream.error is not None:
                raise stream.error from None
            raise error_from_rpc_error(error) from None
        finally:
            call.cancel()  # a no-op once the call has ended; else (on_progress raised) stops it
        if stream.error is not None:  # cannot end well once cancelled; kept for safety
            raise stream.error
        if result is None:
            raise ManyshotError("CreateTask ended without a result", grpc.StatusCode.INTERNAL)
        return result

    def get_task(self, task_id: str, *, timeout: Optional[float] = _UNSET) -> Task:
        """One task with its state and figures (GetTask); NotFoundError when unknown."""
        return Task.from_proto(self._unary(
            self._stub.GetTask, manyshot_pb2.GetTaskRequest(task_id=task_id), task_id, timeout))

    def list_tasks(self, *, page_size: int = 0,
                   timeout: Optional[float] = _UNSET) -> List[Task]:
        """Every task, in task-id order, fetched page by page (ListTasks; page_size 0 is the
        server's default page). With bearer tokens, the calling tenant's tasks."""
        tasks, token = [], ""
        while True:
            response = self._unary(
                self._stub.ListTasks,
                manyshot_pb2.ListTasksRequest(page_size=page_size, page_token=token), None,
                timeout)
            tasks += [Task.from_proto(t) for t in response.tasks]
            token = response.next_page_token
            if not token:
                return tasks

    def delete_task(self, task_id: str, *, timeout: Optional[float] = _UNSET) -> int:
        """Deletes a task and its cached state (DeleteTask); returns the bytes freed.
        NotFoundError when unknown."""
        response = self._unary(self._stub.DeleteTask,
                               manyshot_pb2.DeleteTaskRequest(task_id=task_id), task_id, timeout)
        return response.freed_bytes

    # -- queries --

    def classify(self, task_id: str, inputs: Union[InputLike, Iterable[InputLike]], *,
                 timeout: Optional[float] = _UNSET, **options) -> List[Classification]:
        """Classifies a batch of inputs against the task's labels (Classify).

        inputs: one input or an iterable of them: str, a mapping of placeholder -> value, a
            mapping {"text": ..., "fields": {...}}, or manyshot_pb2.Input.
        options: QueryOptions fields, e.g. mode="parallel", rescale_factor=2.0,
            truncation="keep_end" (cut an input longer than the task's room instead of failing).

        Returns one Classification per input, in input order.
        """
        request = manyshot_pb2.ClassifyRequest(task_id=task_id, inputs=_inputs(inputs, "inputs"),
                                               options=_query_options(options))
        response = self._unary(self._stub.Classify, request, task_id, timeout)
        return [Classification.from_proto(r, i) for i, r in enumerate(response.results)]

    def stream_classify(self, task_id: str, inputs: Iterable[InputLike], *,
                        ordered: bool = True, max_inflight: int = 16,
                        timeout: Optional[float] = _UNSET,
                        **options) -> Iterator[Classification]:
        """Classifies inputs over one StreamClassify stream, one request per input, yielding a
        Classification per input as answers arrive.

        inputs: any iterable, read lazily while at most `max_inflight` inputs await an answer
            (keep it at or below the server's limits.max_stream_inflight).
        ordered: yield in input order (answers that arrive early are held back); False yields
            in completion order. Classification.index is the input's position either way.
        options: QueryOptions fields, as for classify.

        An input the server refuses raises its ManyshotError (request_index says which input)
        and ends the stream. Stopping the iteration early cancels the call.
        """
        if max_inflight < 1:
            raise ConfigurationError("max_inflight must be at least 1")
        # Checked now; the call starts when the iteration does.
        return self._stream_classify(task_id, inputs, ordered, max_inflight,
                                     self._timeout(timeout), _query_options(options))

    def _stream_classify(self, task_id, inputs, ordered, max_inflight, timeout, query):
        slots = threading.Semaphore(max_inflight)
        done = threading.Event()

        def requests():
            for i, value in enumerate(inputs):
                request = manyshot_pb2.ClassifyRequest(
                    task_id=task_id, inputs=[_input(value, f"inputs[{i}]")], options=query,
                    request_id=str(i))
                while not slots.acquire(timeout=0.2):
                    if done.is_set():
                        return
                yield request

        stream = _Requests(requests())
        call = self._stub.StreamClassify(stream, timeout=timeout,
                                         metadata=self.metadata(task_id))
        stream.attach(call)
        held: Dict[int, Classification] = {}
        next_index = 0
        try:
            for response in call:
                slots.release()
                try:
                    index = int(response.request_id)
                except ValueError:
                    raise ManyshotError(f"StreamClassify answered an unknown request_id "
                                        f"{response.request_id!r}", grpc.StatusCode.INTERNAL)
                if response.HasField("error") and response.error.code != 0:
                    raise error_from_rpc_status(response.error, index)
                if len(response.results) != 1:
                    raise ManyshotError(f"StreamClassify answered request {index} with "
                                        f"{len(response.results)} results",
                                        grpc.StatusCode.INTERNAL)
                result = Classification.from_proto(response.results[0], index)
                if not ordered:
                    yield result
                    continue
                held[index] = result
                while next_index in held:
                    yield held.pop(next_index)
                    next_index += 1
            if stream.error is not None:
                raise stream.error
        except grpc.RpcError as error:
            if stream.error is not None:
                raise stream.error from None
            raise error_from_rpc_error(error) from None
        finally:
            done.set()
            call.cancel()

    def score(self, task_id: str, items: Iterable[ScoreItemLike], *,
              timeout: Optional[float] = _UNSET, **options) -> List[ScoreResult]:
        """Multi-choice (Score): scores each item's candidate answers as continuations of its
        input. items: (input, candidates) tuples, mappings {"input": ..., "candidates": [...]}
        or manyshot_pb2.ScoreItem. options: QueryOptions fields. One ScoreResult per item."""
        request = manyshot_pb2.ScoreRequest(
            task_id=task_id, items=[_score_item(x, f"items[{i}]") for i, x in enumerate(items)],
            options=_query_options(options))
        response = self._unary(self._stub.Score, request, task_id, timeout)
        return [ScoreResult.from_proto(r) for r in response.results]

    def generate(self, task_id: str, input: InputLike, *,  # noqa: A002 (the proto's name)
                 max_new_tokens: Optional[int] = None, strategy: Optional[str] = None,
                 beam_width: Optional[int] = None, length_penalty: Optional[float] = None,
                 stop: Sequence[str] = (), stop_at_eos: Optional[bool] = None,
                 on_token: Optional[Callable[[GeneratedToken], None]] = None,
                 timeout: Optional[float] = _UNSET, **options) -> Generation:
        """Generates a continuation of `input` after the task's demonstrations (Generate).

        strategy: "greedy" (default) or "beam" (with beam_width, length_penalty).
        stop: strings that end generation (not returned); stop_at_eos: default True.
        on_token: called with each GeneratedToken as the server streams it.
        options: QueryOptions fields (mode, rescale_factor, ...).
        """
        generation = {"strategy": strategy, "max_new_tokens": max_new_tokens,
                      "beam_width": beam_width, "length_penalty": length_penalty,
                      "stop": list(stop) or None, "stop_at_eos": stop_at_eos}
        request = manyshot_pb2.GenerateRequest(
            task_id=task_id, input=_input(input, "input"),
            options=_message(manyshot_pb2.GenerationOptions, generation, "options"))
        request.options.query.CopyFrom(_query_options(options))
        call = self._stub.Generate(request, timeout=self._timeout(timeout),
                                   metadata=self.metadata(task_id))
        tokens: List[GeneratedToken] = []
        try:
            for response in call:
                event = response.WhichOneof("event")
                if event == "token":
                    token = GeneratedToken.from_proto(response.token)
                    tokens.append(token)
                    if on_token is not None:
                        on_token(token)
                elif event == "result":
                    return Generation.from_proto(response.result, tokens)
        except grpc.RpcError as error:
            raise error_from_rpc_error(error) from None
        finally:
            call.cancel()
        raise ManyshotError("Generate ended without a result", grpc.StatusCode.INTERNAL)


__all__ = ["Client", "DEFAULT_SERVER", "SERVER_ENV", "TASK_METADATA"]
