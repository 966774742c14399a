"""The server's reflection service (grpc.reflection.v1alpha.ServerReflection), as grpcurl uses it:
which services the server lists, and the descriptors of any of them, fetched from the server
alone (no local .proto files).

    with manyshot_client.Client() as client:
        reflection = client.reflection()
        for name in reflection.services():
            print(name, sorted(reflection.methods(name)))
"""

from __future__ import annotations

from typing import Dict, List

from ._stubs import descriptor_pb2, descriptor_pool, grpc, reflection_pb2, reflection_pb2_grpc
from .errors import ManyshotError, error_from_rpc_error


class Reflection:
    """Asks the reflection service of a Client's server, one request per stream."""

    def __init__(self, client) -> None:
        self._client = client
        self._stub = reflection_pb2_grpc.ServerReflectionStub(client.channel)

    def _ask(self, **request) -> reflection_pb2.ServerReflectionResponse:
        timeout = self._client.timeout if self._client.timeout is not None else 60
        try:
            responses = self._stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(**request)]), timeout=timeout,
                metadata=self._client.metadata())
            response = next(iter(responses))
        except grpc.RpcError as error:
            raise error_from_rpc_error(error) from None
        if response.WhichOneof("message_response") == "error_response":
            code = next((c for c in grpc.StatusCode
                         if c.value[0] == response.error_response.error_code),
                        grpc.StatusCode.UNKNOWN)
            raise ManyshotError(f"reflection {request}: {response.error_response.error_message}",
                                code)
        return response

    def services(self) -> List[str]:
        """The names of the services the server lists."""
        return [s.name for s in self._ask(list_services="*").list_services_response.service]

    def file_descriptors(self, symbol: str) -> Dict[str, descriptor_pb2.FileDescriptorProto]:
        """The FileDescriptorProto defining `symbol` (a service, message or enum full name) and
        every file it imports, directly or not, by file name."""
        files: Dict[str, descriptor_pb2.FileDescriptorProto] = {}
        pending = [("symbol", symbol)]
        while pending:
            kind, name = pending.pop()
            response = (self._ask(file_containing_symbol=name) if kind == "symbol"
                        else self._ask(file_by_filename=name))
            for raw in response.file_descriptor_response.file_descriptor_proto:
                proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
                files.setdefault(proto.name, proto)
            for proto in list(files.values()):
                pending += [("file", d) for d in proto.dependency
                            if d not in files and ("file", d) not in pending]
        return files

    def pool(self, symbol: str) -> descriptor_pool.DescriptorPool:
        """A new DescriptorPool holding `symbol`'s file and its imports (dependencies first)."""
        files = self.file_descriptors(symbol)
        pool, added = descriptor_pool.DescriptorPool(), set()

        def add(name: str) -> None:
            if name in added:
                return
            for dependency in files[name].dependency:
                add(dependency)
            pool.Add(files[name])
            added.add(name)

        for name in files:
            add(name)
        return pool

    def methods(self, service: str) -> Dict[str, descriptor_pb2.MethodDescriptorProto]:
        """The methods of `service` by name, as MethodDescriptorProtos (input_type,
        output_type, client_streaming, server_streaming)."""
        for proto in self.file_descriptors(service).values():
            for candidate in proto.service:
                full_name = f"{proto.package}.{candidate.name}" if proto.package else \
                    candidate.name
                if full_name == service:
                    return {m.name: m for m in candidate.method}
        raise ManyshotError(f"reflection: no service {service} in its own file",
                            grpc.StatusCode.NOT_FOUND)
