"""Errors raised by manyshot_client.

Every failed call raises a ManyshotError: the server's gRPC status code and message and, when the
server attached them (the `grpc-status-details-bin` trailer, a google.rpc.Status; or in-band in a
StreamClassify answer), the machine-readable details: the ErrorInfo reason, the BadRequest field
violations of an INVALID_ARGUMENT, and the RetryInfo delay of RESOURCE_EXHAUSTED / UNAVAILABLE.
The common codes have their own subclasses (NotFoundError, InvalidArgumentError, ...), so

    try:
        client.get_task("t")
    except manyshot_client.NotFoundError:
        ...

Mistakes found before anything is sent (a bad argument, a token that would cross the network in
cleartext) raise ConfigurationError, which is also a ValueError and has no status code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple, Type

from ._stubs import DecodeError, error_details_pb2, grpc, status_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"
ERROR_INFO_TYPE = "google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "google.rpc.BadRequest"
RETRY_INFO_TYPE = "google.rpc.RetryInfo"


@dataclass(frozen=True)
class FieldViolation:
    """One google.rpc.BadRequest.FieldViolation: the request field (e.g. "inputs[0].text" or
    "spec.labels") and what is wrong with it."""
    field: str
    description: str


class ManyshotError(Exception):
    """A failed call.

    Attributes:
        code: the grpc.StatusCode (None for a ConfigurationError, which is found before any call).
        message: the status message.
        reason: ErrorInfo.reason, a stable UPPER_SNAKE name (README "Errors"), when sent.
        domain: ErrorInfo.domain ("manyshot.v1"), when sent.
        metadata: ErrorInfo.metadata, when sent.
        field_violations: the BadRequest field violations (INVALID_ARGUMENT).
        retry_delay: seconds to wait before retrying (RetryInfo), when sent.
        request_index: for an in-band StreamClassify error, the position of the failed input.
    """

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, *,
                 reason: Optional[str] = None, domain: Optional[str] = None,
                 metadata: Optional[Dict[str, str]] = None,
                 field_violations: Iterable[FieldViolation] = (),
                 retry_delay: Optional[float] = None,
                 request_index: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata = dict(metadata or {})
        self.field_violations: Tuple[FieldViolation, ...] = tuple(field_violations)
        self.retry_delay = retry_delay
        self.request_index = request_index

    @property
    def fields(self) -> Tuple[str, ...]:
        """The request fields named by the field violations."""
        return tuple(v.field for v in self.field_violations)

    def __str__(self) -> str:
        text = f"{self.code.name}: {self.message}" if self.code is not None else self.message
        if self.request_index is not None:
            text = f"request {self.request_index}: {text}"
        return text

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(code={self.code.name if self.code else None}, "
                f"message={self.message!r}, reason={self.reason!r}, "
                f"field_violations={list(self.field_violations)!r})")


class ConfigurationError(ManyshotError, ValueError):
    """A bad client argument, found before anything is sent (code is None)."""


class InvalidArgumentError(ManyshotError):
    """INVALID_ARGUMENT: a bad field; field_violations names it."""


class NotFoundError(ManyshotError):
    """NOT_FOUND: an unknown task."""


class AlreadyExistsError(ManyshotError):
    """ALREADY_EXISTS: a task id reused with different content (pass replace=True)."""


class FailedPreconditionError(ManyshotError):
    """FAILED_PRECONDITION: e.g. a task that is not READY, or a mode the model lacks."""


class ResourceExhaustedError(ManyshotError):
    """RESOURCE_EXHAUSTED: a queue, budget or limit is full; see retry_delay."""


class UnauthenticatedError(ManyshotError):
    """UNAUTHENTICATED: a missing or unknown bearer token."""


class PermissionDeniedError(ManyshotError):
    """PERMISSION_DENIED."""


class UnavailableError(ManyshotError):
    """UNAVAILABLE: the server cannot be reached or is shutting down; retry later."""


class DeadlineExceededError(ManyshotError):
    """DEADLINE_EXCEEDED: the call's timeout passed."""


class UnimplementedError(ManyshotError):
    """UNIMPLEMENTED: the server lacks the method."""


class CancelledError(ManyshotError):
    """CANCELLED."""


_BY_CODE: Dict[grpc.StatusCode, Type[ManyshotError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.CANCELLED: CancelledError,
}
_CODE_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def _type_name(type_url: str) -> str:
    return type_url.rsplit("/", 1)[-1]


def error_from_status(code: grpc.StatusCode, message: str,
                      status: Optional[status_pb2.Status] = None,
                      request_index: Optional[int] = None) -> ManyshotError:
    """The ManyshotError subclass for `code`, with the details of `status` (a google.rpc.Status)."""
    kwargs = {}
    violations = []
    for detail in status.details if status is not None else ():
        name = _type_name(detail.type_url)
        if name == ERROR_INFO_TYPE:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                kwargs.update(reason=info.reason, domain=info.domain, metadata=dict(info.metadata))
        elif name == BAD_REQUEST_TYPE:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad):
                violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
        elif name == RETRY_INFO_TYPE:
            retry = error_details_pb2.RetryInfo()
            if detail.Unpack(retry):
                kwargs["retry_delay"] = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    cls = _BY_CODE.get(code, ManyshotError)
    return cls(message, code, field_violations=violations, request_index=request_index, **kwargs)


def error_from_rpc_status(status: status_pb2.Status,
                          request_index: Optional[int] = None) -> ManyshotError:
    """The error of an in-band google.rpc.Status (StreamClassify's ClassifyResponse.error)."""
    code = _CODE_BY_NUMBER.get(status.code, grpc.StatusCode.UNKNOWN)
    return error_from_status(code, status.message, status, request_index)


def error_from_rpc_error(error: grpc.RpcError) -> ManyshotError:
    """The ManyshotError of a failed gRPC call (a grpc.RpcError that is also a grpc.Call)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or str(error)
    status = None
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == STATUS_DETAILS_KEY:
            parsed = status_pb2.Status()
            try:
                parsed.ParseFromString(value)
            except DecodeError:  # a malformed trailer leaves the plain code and message
                break
            if parsed.code == code.value[0]:
                status = parsed
            break
    converted = error_from_status(code, message, status)
    converted.rpc_error = error
    return converted
