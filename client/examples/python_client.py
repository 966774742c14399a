#!/usr/bin/python3
"""A manyshot client in plain Python: Debian's python3-grpcio and python3-protobuf only.

No generated code and no grpc_tools: the message classes are built at run time from the
server's reflection service (grpc.reflection.v1alpha.ServerReflection), whose own request and
response messages are written here by hand as a FileDescriptorProto.

    /usr/bin/python3 client/examples/python_client.py --server=127.0.0.1:50051
    /usr/bin/python3 client/examples/python_client.py --reflection_only

Lists the services, describes ManyShot, creates a small SST-2 task (its demonstrations sent in
two chunks on the CreateTask stream), classifies two inputs and prints the results. Every call for
the task carries `x-manyshot-task: TASK_ID` metadata, so that a proxy in front of several replicas
(deploy/proxy/) sends it to the replica holding the task; a single server ignores it. A failed call
(e.g. UNIMPLEMENTED on a server that lacks the RPC) is printed as "python_client.py: METHOD: CODE:
message" and the exit status is 1.
"""

import argparse
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

PROG = "python_client.py"
SERVICE = "manyshot.v1.ManyShot"
TASK_METADATA = "x-manyshot-task"  # routes per-task calls through a task-affinity proxy

DEMONSTRATIONS = [
    ("a gripping, beautifully acted film", "positive"),
    ("the plot is a mess and the jokes fall flat", "negative"),
    ("one of the most charming movies of the year", "positive"),
    ("tedious, overlong and instantly forgettable", "negative"),
    ("a warm and funny story that earns its tears", "positive"),
    ("even the actors look bored", "negative"),
]
INPUTS = ["an utterly delightful surprise", "a dull, lifeless two hours"]


def message_class(descriptor):
    """The Python class of a message descriptor, for old and new protobuf releases."""
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


def reflection_messages():
    """ServerReflectionRequest / ServerReflectionResponse (grpc/reflection/v1alpha/reflection.proto,
    the fields this script uses; field numbers as upstream)."""
    T = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(
        name="manyshot_example/reflection.proto", package="grpc.reflection.v1alpha", syntax="proto3")

    def message(name, fields, oneof=None):
        m = f.message_type.add(name=name)
        for number, field_name, kind, extra in fields:
            field = m.field.add(name=field_name, number=number, type=kind, label=T.LABEL_OPTIONAL)
            if extra.get("repeated"):
                field.label = T.LABEL_REPEATED
            if "type_name" in extra:
                field.type_name = ".grpc.reflection.v1alpha." + extra["type_name"]
            if "oneof" in extra:
                field.oneof_index = extra["oneof"]
        if oneof:
            m.oneof_decl.add(name=oneof)
        return m

    one = {"oneof": 0}
    message("ServerReflectionRequest", [
        (1, "host", T.TYPE_STRING, {}),
        (3, "file_by_filename", T.TYPE_STRING, one),
        (4, "file_containing_symbol", T.TYPE_STRING, one),
        (7, "list_services", T.TYPE_STRING, one),
    ], oneof="message_request")
    message("FileDescriptorResponse", [(1, "file_descriptor_proto", T.TYPE_BYTES, {"repeated": 1})])
    message("ServiceResponse", [(1, "name", T.TYPE_STRING, {})])
    message("ListServiceResponse", [
        (1, "service", T.TYPE_MESSAGE, {"repeated": 1, "type_name": "ServiceResponse"})])
    message("ErrorResponse", [(1, "error_code", T.TYPE_INT32, {}),
                              (2, "error_message", T.TYPE_STRING, {})])
    message("ServerReflectionResponse", [
        (1, "valid_host", T.TYPE_STRING, {}),
        (4, "file_descriptor_response", T.TYPE_MESSAGE,
         {"type_name": "FileDescriptorResponse", "oneof": 0}),
        (6, "list_services_response", T.TYPE_MESSAGE,
         {"type_name": "ListServiceResponse", "oneof": 0}),
        (7, "error_response", T.TYPE_MESSAGE, {"type_name": "ErrorResponse", "oneof": 0}),
    ], oneof="message_response")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return (message_class(pool.FindMessageTypeByName("grpc.reflection.v1alpha." + n))
            for n in ("ServerReflectionRequest", "ServerReflectionResponse"))


class Reflection:
    """Asks the server's reflection service, one request per call."""

    def __init__(self, channel):
        self.Request, self.Response = reflection_messages()
        self.call = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self.Response.FromString)

    def ask(self, **kwargs):
        response = next(iter(self.call(iter([self.Request(**kwargs)]), timeout=10)))
        if response.WhichOneof("message_response") == "error_response":
            raise LookupError(f"reflection: {response.error_response.error_message}")
        return response

    def services(self):
        return [s.name for s in self.ask(list_services="*").list_services_response.service]

    def files_for(self, symbol):
        """FileDescriptorProtos defining `symbol` and everything they import, by file name."""
        files = {}
        pending = [("symbol", symbol)]
        while pending:
            kind, name = pending.pop()
            response = (self.ask(file_containing_symbol=name) if kind == "symbol"
                        else self.ask(file_by_filename=name))
            for raw in response.file_descriptor_response.file_descriptor_proto:
                fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
                files.setdefault(fd.name, fd)
            for fd in list(files.values()):
                pending += [("file", d) for d in fd.dependency
                            if d not in files and ("file", d) not in pending]
        return files


def build_pool(files):
    """A DescriptorPool holding `files`, added dependencies first."""
    pool, added = descriptor_pool.DescriptorPool(), set()

    def add(name):
        if name in added:
            return
        for dependency in files[name].dependency:
            add(dependency)
        pool.Add(files[name])
        added.add(name)

    for name in files:
        add(name)
    return pool


class ManyShot:
    """Generic calls to manyshot.v1.ManyShot with classes from the reflected descriptors."""

    def __init__(self, channel, pool, files):
        self.channel, self.pool = channel, pool
        service = pool.FindServiceByName(SERVICE)
        # Streaming flags from the FileDescriptorProto (every protobuf release has them there).
        proto = next(s for fd in files.values() for s in fd.service
                     if f"{fd.package}.{s.name}" == SERVICE)
        self.methods = {m.name: m for m in proto.method}
        self.service = service

    def describe(self):
        lines = []
        for m in self.methods.values():
            cs = "stream " if m.client_streaming else ""
            ss = "stream " if m.server_streaming else ""
            lines.append(f"  rpc {m.name}({cs}{m.input_type.lstrip('.')}) "
                         f"returns ({ss}{m.output_type.lstrip('.')})")
        return lines

    def new(self, type_name, value):
        """A message of `type_name` ("manyshot.v1.X") filled from a JSON-like dict."""
        cls = message_class(self.pool.FindMessageTypeByName(type_name))
        return json_format.ParseDict(value, cls())

    def _callable(self, name):
        m = self.methods[name]
        response_cls = message_class(self.pool.FindMessageTypeByName(m.output_type.lstrip(".")))
        kind = {(False, False): self.channel.unary_unary, (False, True): self.channel.unary_stream,
                (True, False): self.channel.stream_unary,
                (True, True): self.channel.stream_stream}[(m.client_streaming, m.server_streaming)]
        return kind(f"/{SERVICE}/{name}", request_serializer=lambda x: x.SerializeToString(),
                    response_deserializer=response_cls.FromString)

    def call(self, name, request, timeout=60, task_id=None):
        """Calls `name`; a per-task call passes its task_id, sent as x-manyshot-task metadata."""
        metadata = ((TASK_METADATA, task_id),) if task_id else None
        return self._callable(name)(request, timeout=timeout, metadata=metadata)


def to_dict(message):
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--task_id", default="python-example-sst2")
    parser.add_argument("--reflection_only", action="store_true",
                        help="list services and describe ManyShot, then exit")
    args = parser.parse_args()

    channel = grpc.insecure_channel(args.server)
    method = "ServerReflectionInfo"
    try:
        reflection = Reflection(channel)
        services = reflection.services()
        print("services:")
        for name in services:
            print(f"  {name}")
        if SERVICE not in services:
            print(f"{PROG}: {SERVICE} is not served at {args.server}", file=sys.stderr)
            return 1
        files = reflection.files_for(SERVICE)
        client = ManyShot(channel, build_pool(files), files)
        print(f"service {SERVICE}:")
        print("\n".join(client.describe()))
        if args.reflection_only:
            return 0

        # CreateTask: the first message carries the id and the spec, the second more
        # demonstrations; the server streams progress and ends with the result.
        demos = [{"text": t, "label": l} for t, l in DEMONSTRATIONS]
        spec = {"input_template": "Review: {text}\nSentiment:", "labels": ["negative", "positive"]}
        requests = [
            client.new("manyshot.v1.CreateTaskRequest",
                       {"task_id": args.task_id, "spec": spec, "demonstrations": demos[:3]}),
            client.new("manyshot.v1.CreateTaskRequest", {"demonstrations": demos[3:]}),
        ]
        method = "CreateTask"
        for response in client.call(method, iter(requests), timeout=600, task_id=args.task_id):
            event = response.WhichOneof("event")
            if event == "progress":
                p = response.progress
                print(f"progress: phase {p.phase}, {p.groups_encoded}/{p.groups_total} groups, "
                      f"{p.tokens_encoded} tokens", file=sys.stderr)
            elif event == "result":
                task = response.result.task
                print(f"task {task.task_id}: created={response.result.created}, "
                      f"{task.stats.demonstrations} demonstrations in {task.stats.groups} groups")

        method = "Classify"
        request = client.new("manyshot.v1.ClassifyRequest",
                             {"task_id": args.task_id, "inputs": [{"text": t} for t in INPUTS]})
        response = client.call(method, request, task_id=args.task_id)
        for text, result in zip(INPUTS, response.results):
            probability = result.scores[result.label_index].probability if result.scores else 0.0
            print(f"{result.label}\t{probability:.4f}\t{text}")
        return 0
    except grpc.RpcError as error:
        print(f"{PROG}: {method}: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    except LookupError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    finally:
        channel.close()


if __name__ == "__main__":
    sys.exit(main())
