#!/usr/bin/python3
"""grpcurl_lite: a small grpcurl work-alike that learns every type from server reflection.

A TEST HARNESS, not a product: tests/client/grpcurl_doc_test.py runs the grpcurl commands of
client/examples/grpcurl.md with it, because grpcurl itself is not installable here. It needs only
Debian's python3-grpcio and python3-protobuf (/usr/bin/python3) and /usr/bin/protoc: the stubs of
the reflection service itself are generated at run time from
proto/grpc/reflection/v1alpha/reflection.proto into a temporary directory; every other message
type comes from the server's grpc.reflection.v1alpha.ServerReflection (FileContainingSymbol and
FileByFilename, dependencies resolved recursively; google/protobuf/*.proto fall back to the local
well-known types when the server does not send them).

    grpcurl_lite.py [flags] ADDRESS list [SERVICE]
    grpcurl_lite.py [flags] ADDRESS describe [SYMBOL]
    grpcurl_lite.py [flags] ADDRESS SERVICE/METHOD      (or SERVICE.METHOD)

Flags (Go flag syntax as grpcurl: -flag, --flag, -flag=value, -flag value; flags stop at the
first argument that is not one): -plaintext, -H 'name: value' (repeatable; also -rpc-header and
-reflect-header), -d DATA or -d @ (JSON request(s) from stdin; several concatenated JSON objects
for client-streaming and bidi methods), -emit-defaults, -allow-unknown-fields, -format-error,
-format json, -max-time SECONDS, -connect-timeout SECONDS, -cacert FILE, -cert FILE, -key FILE,
-authority NAME, -servername NAME, -user-agent NAME.

Output as grpcurl prints it: each response message as indented JSON with lowerCamelCase names
and without default values (unless -emit-defaults); `list` prints sorted names; `describe`
prints "NAME is a KIND:" and a protobuf-source rendering of the descriptor (close to grpcurl's,
not byte for byte). Exit status as grpcurl: 0; an RPC error prints
"ERROR:\\n  Code: NotFound\\n  Message: ..." (and any status details) on stderr and exits
64 + the gRPC status code; other failures exit 1, usage errors 2.

Differences from grpcurl: requests are all read and parsed before the call starts (a bidi
stream's requests are sent after stdin closes, not as they are typed); only the JSON format;
no -proto/-protoset, -insecure, -unix, ALTS, -v output.

-connect-timeout defaults to 10 s as in grpcurl, or to $GRPCURL_LITE_CONNECT_TIMEOUT seconds.
The proto directory holding grpc/reflection/v1alpha/reflection.proto is $GRPCURL_LITE_PROTO_DIR
or, by default, proto/ of the repository this file is in.
"""

import base64
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "proto")
REFLECTION_PROTO = "grpc/reflection/v1alpha/reflection.proto"
REFLECTION_METHOD = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
STATUS_CODE_OFFSET = 64  # grpcurl exits 64 + the status code of a failed RPC

# Go's codes.Code.String() for each status code.
CODE_NAMES = ["OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
              "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
              "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
              "Unauthenticated"]

BOOL_FLAGS = {"plaintext", "insecure", "emit-defaults", "allow-unknown-fields", "format-error",
              "v", "vv", "help", "h", "use-reflection", "expand-headers", "msg-template"}
VALUE_FLAGS = {"H", "rpc-header", "reflect-header", "d", "cacert", "cert", "key", "authority",
               "servername", "max-time", "connect-timeout", "format", "user-agent",
               "max-msg-sz"}
UNSUPPORTED = {"insecure": "-insecure (no certificate verification) is not supported",
               "v": "-v is not supported", "vv": "-vv is not supported",
               "expand-headers": "-expand-headers is not supported",
               "msg-template": "-msg-template is not supported"}


class Exit(Exception):
    """Leave with `code` after printing `message` (if any) on stderr."""

    def __init__(self, code, message=None):
        super().__init__(message)
        self.code = code
        self.message = message


def usage_error(message):
    return Exit(2, f"{message}\nTry '{os.path.basename(sys.argv[0])} -help' for more details.")


def fail(message, error=None):
    return Exit(1, f"{message}: {error}" if error is not None else message)


def parse_flags(argv):
    """Go flag package rules: flags first, then positional arguments."""
    flags = {"H": [], "rpc-header": [], "reflect-header": []}
    args = list(argv)
    while args:
        arg = args[0]
        if arg == "--":
            args.pop(0)
            break
        if not arg.startswith("-") or arg == "-":
            break
        args.pop(0)
        name = arg.lstrip("-")
        if arg.startswith("---") or not name:
            raise usage_error(f"bad flag syntax: {arg}")
        value = None
        if "=" in name:
            name, value = name.split("=", 1)
        if name in BOOL_FLAGS:
            if value is None:
                flags[name] = True
            elif value.lower() in ("1", "t", "true"):
                flags[name] = True
            elif value.lower() in ("0", "f", "false"):
                flags[name] = False
            else:
                raise usage_error(f'invalid boolean value "{value}" for -{name}')
        elif name in VALUE_FLAGS:
            if value is None:
                if not args:
                    raise usage_error(f"flag needs an argument: -{name}")
                value = args.pop(0)
            if isinstance(flags.get(name), list):
                flags[name].append(value)
            else:
                flags[name] = value
        else:
            raise usage_error(f"flag provided but not defined: -{name}")
    return flags, args


def metadata_from_headers(headers):
    """grpcurl's MetadataFromHeaders: 'Name: value' -> ('name', 'value'); -bin values are
    base64."""
    metadata = []
    for header in headers:
        name, _, value = header.partition(":")
        name = name.strip().lower()
        value = value.strip()
        if name.endswith("-bin"):
            try:
                value = base64.b64decode(value + "=" * (-len(value) % 4))
            except ValueError as error:
                raise fail(f"Failed to decode binary header {name}", error)
        metadata.append((name, value))
    return metadata


def load_reflection_module(proto_dir, tmp):
    """reflection_pb2 generated now by /usr/bin/protoc into `tmp`."""
    source = os.path.join(proto_dir, REFLECTION_PROTO)
    if not os.path.isfile(source):
        raise fail(f"grpcurl_lite: {source} not found (set GRPCURL_LITE_PROTO_DIR)")
    result = subprocess.run(["/usr/bin/protoc", f"-I{proto_dir}", f"--python_out={tmp}",
                             REFLECTION_PROTO], capture_output=True, text=True)
    if result.returncode != 0:
        raise fail(f"grpcurl_lite: protoc failed on {source}", result.stderr.strip())
    path = os.path.join(tmp, REFLECTION_PROTO[:-len(".proto")] + "_pb2.py")
    spec = importlib.util.spec_from_file_location("grpcurl_lite_reflection_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def message_class(descriptor):
    from google.protobuf import message_factory
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


class SymbolNotFound(Exception):
    pass


class ReflectionSource:
    """Descriptors from the server's reflection service, in a private DescriptorPool."""

    def __init__(self, grpc, channel, reflection_pb2, metadata, timeout):
        from google.protobuf import descriptor_pb2, descriptor_pool
        self.grpc = grpc
        self.pb = reflection_pb2
        self.descriptor_pb2 = descriptor_pb2
        self.metadata = metadata
        self.timeout = timeout
        self.call = channel.stream_stream(
            REFLECTION_METHOD,
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        self.pool = descriptor_pool.DescriptorPool()
        self.files = {}  # name -> FileDescriptorProto, every file fetched
        self.added = set()  # names of the files added to self.pool

    def _ask(self, **request):
        try:
            responses = self.call(iter([self.pb.ServerReflectionRequest(**request)]),
                                  metadata=self.metadata, timeout=self.timeout)
            response = next(iter(responses))
        except self.grpc.RpcError as error:
            if error.code() == self.grpc.StatusCode.UNIMPLEMENTED:
                raise fail("server does not support the reflection API")
            raise Exit(1, f"Failed to query the reflection service: {error.code().name}: "
                          f"{error.details()}")
        except StopIteration:
            raise fail("the reflection service answered nothing")
        kind = response.WhichOneof("message_response")
        if kind == "error_response":
            if response.error_response.error_code == 5:  # NOT_FOUND
                raise SymbolNotFound(response.error_response.error_message)
            raise fail("reflection error", response.error_response.error_message)
        return response

    def list_services(self):
        response = self._ask(list_services="*")
        return sorted(service.name for service in response.list_services_response.service)

    def _take(self, response):
        for blob in response.file_descriptor_response.file_descriptor_proto:
            proto = self.descriptor_pb2.FileDescriptorProto.FromString(blob)
            self.files.setdefault(proto.name, proto)

    def _file_by_name(self, name):
        if name in self.files:
            return
        try:
            self._take(self._ask(file_by_filename=name))
        except SymbolNotFound:
            pass
        if name not in self.files and name.startswith("google/protobuf/"):
            self.files[name] = local_well_known_file(name)
        if name not in self.files:
            raise fail(f"File not found: {name}")

    def _add(self, name, seen=()):
        if name in self.added:
            return
        if name in seen:
            raise fail(f"import cycle through {name}")
        self._file_by_name(name)
        proto = self.files[name]
        for dependency in proto.dependency:
            self._add(dependency, seen + (name,))
        self.pool.Add(proto)
        self.added.add(name)

    def load_symbol(self, symbol):
        """Fetches the file defining `symbol` (and its dependencies) into the pool."""
        symbol = symbol.lstrip(".")
        try:
            self.pool.FindFileContainingSymbol(symbol)
            return
        except KeyError:
            pass
        try:
            response = self._ask(file_containing_symbol=symbol)
        except SymbolNotFound:
            raise SymbolNotFound(f"Symbol not found: {symbol}")
        self._take(response)
        for name in list(self.files):
            self._add(name)

    def find(self, symbol):
        """(kind, descriptor) of a fully qualified symbol."""
        symbol = symbol.lstrip(".")
        try:
            self.load_symbol(symbol)
        except SymbolNotFound:
            if "." not in symbol:
                raise
            self.load_symbol(symbol.rpartition(".")[0])  # maybe Enum.VALUE
        pool = self.pool
        for kind, lookup in [("message", pool.FindMessageTypeByName),
                             ("enum", pool.FindEnumTypeByName),
                             ("service", pool.FindServiceByName),
                             ("method", pool.FindMethodByName),
                             ("extension", pool.FindExtensionByName),
                             ("field", pool.FindFieldByName),
                             ("oneof", pool.FindOneofByName)]:
            try:
                return kind, lookup(symbol)
            except KeyError:
                continue
        parent, _, name = symbol.rpartition(".")
        try:  # Enum.VALUE, as protoreflect names values
            enum = pool.FindEnumTypeByName(parent)
            if name in enum.values_by_name:
                return "enum value", enum.values_by_name[name]
        except KeyError:
            pass
        for enum in self.enums_in_scope(parent):  # VALUE in the enum's scope, as protoc does
            if name in enum.values_by_name:
                return "enum value", enum.values_by_name[name]
        raise SymbolNotFound(f"Symbol not found: {symbol}")

    def enums_in_scope(self, scope):
        """The enums declared directly in a package or message `scope`."""
        try:
            return list(self.pool.FindMessageTypeByName(scope).enum_types)
        except KeyError:
            pass
        enums = []
        for name in sorted(self.added):
            file = self.pool.FindFileByName(name)
            if file.package == scope:
                enums.extend(file.enum_types_by_name.values())
        return enums


def local_well_known_file(name):
    """A google/protobuf/*.proto from the protobuf package itself."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf import (any_pb2, api_pb2, duration_pb2, empty_pb2,  # noqa: F401
                                 field_mask_pb2, source_context_pb2, struct_pb2, timestamp_pb2,
                                 type_pb2, wrappers_pb2)
    try:
        descriptor = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise fail(f"File not found: {name}")
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor.CopyToProto(proto)
    return proto


# --- describe: a protobuf-source rendering of descriptors, close to grpcurl's -----------------

SCALAR_TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
                7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32",
                16: "sfixed64", 17: "sint32", 18: "sint64"}


def proto_of(descriptor):
    from google.protobuf import descriptor as d, descriptor_pb2
    for kind, proto_class in [(d.Descriptor, descriptor_pb2.DescriptorProto),
                              (d.EnumDescriptor, descriptor_pb2.EnumDescriptorProto),
                              (d.ServiceDescriptor, descriptor_pb2.ServiceDescriptorProto),
                              (d.MethodDescriptor, descriptor_pb2.MethodDescriptorProto)]:
        if isinstance(descriptor, kind):
            proto = proto_class()
            descriptor.CopyToProto(proto)
            return proto
    raise TypeError(f"no proto for {type(descriptor).__name__}")


def field_type(field):
    if field.type in (11, 14, 10):  # message, enum, group
        return field.type_name
    return SCALAR_TYPES[field.type]


def options_text(field):
    options = []
    if field.HasField("default_value"):
        value = field.default_value
        options.append(f"default = {json.dumps(value) if field.type == 9 else value}")
    if field.options.deprecated:
        options.append("deprecated = true")
    if field.options.HasField("packed"):
        options.append(f"packed = {str(field.options.packed).lower()}")
    return f" [{', '.join(options)}]" if options else ""


def field_line(field, syntax, nested, in_oneof=False):
    map_entry = None
    if field.type == 11 and field.label == 3:
        short = field.type_name.rsplit(".", 1)[-1]
        for entry in nested:
            if entry.options.map_entry and entry.name == short:
                map_entry = entry
    if map_entry is not None:
        key, value = map_entry.field[0], map_entry.field[1]
        type_text = f"map<{field_type(key)}, {field_type(value)}>"
        label = ""
    else:
        type_text = field_type(field)
        if in_oneof:
            label = ""
        elif field.label == 3:
            label = "repeated "
        elif field.label == 2:
            label = "required "
        elif syntax != "proto3" or field.proto3_optional:
            label = "optional "
        else:
            label = ""
    return f"{label}{type_text} {field.name} = {field.number}{options_text(field)};"


def message_text(message, syntax, indent=""):
    inner = indent + "  "
    lines = [f"{indent}message {message.name} {{"]
    nested = list(message.nested_type)
    done_oneofs = set()
    real_oneof = {}
    for i, oneof in enumerate(message.oneof_decl):
        members = [f for f in message.field if f.HasField("oneof_index") and f.oneof_index == i]
        if not all(f.proto3_optional for f in members):
            real_oneof[i] = members
    for field in sorted(message.field, key=lambda f: f.number):
        index = field.oneof_index if field.HasField("oneof_index") else None
        if index in real_oneof:
            if index in done_oneofs:
                continue
            done_oneofs.add(index)
            lines.append(f"{inner}oneof {message.oneof_decl[index].name} {{")
            for member in sorted(real_oneof[index], key=lambda f: f.number):
                lines.append(f"{inner}  {field_line(member, syntax, nested, True)}")
            lines.append(f"{inner}}}")
        else:
            lines.append(f"{inner}{field_line(field, syntax, nested)}")
    for child in sorted(nested, key=lambda m: m.name):
        if not child.options.map_entry:
            lines.append(message_text(child, syntax, inner))
    for enum in sorted(message.enum_type, key=lambda e: e.name):
        lines.append(enum_text(enum, inner))
    for reserved in message.reserved_range:
        end = reserved.end - 1
        lines.append(f"{inner}reserved {reserved.start}"
                     f"{'' if end == reserved.start else f' to {end}'};")
    for name in message.reserved_name:
        lines.append(f'{inner}reserved "{name}";')
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def enum_text(enum, indent=""):
    lines = [f"{indent}enum {enum.name} {{"]
    for value in enum.value:
        lines.append(f"{indent}  {value.name} = {value.number};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def method_line(method):
    client = "stream " if method.client_streaming else ""
    server = "stream " if method.server_streaming else ""
    return (f"rpc {method.name} ( {client}{method.input_type} ) returns "
            f"( {server}{method.output_type} );")


def service_text(service):
    lines = [f"service {service.name} {{"]
    for method in sorted(service.method, key=lambda m: m.name):
        lines.append(f"  {method_line(method)}")
    lines.append("}")
    return "\n".join(lines)


def describe_text(kind, descriptor):
    """(grpcurl's element type phrase, the descriptor's source text)."""
    from google.protobuf import descriptor_pb2
    syntax = getattr(descriptor, "file", None)
    syntax = syntax.syntax if syntax is not None else "proto3"
    if kind == "message":
        parent = descriptor.containing_type
        if descriptor.GetOptions().map_entry and parent is not None:
            for field in parent.fields:
                if field.message_type is descriptor:
                    return ("the entry type for a map field",
                            field_text(field, syntax))
        return "a message", message_text(proto_of(descriptor), syntax)
    if kind == "enum":
        return "an enum", enum_text(proto_of(descriptor))
    if kind == "service":
        return "a service", service_text(proto_of(descriptor))
    if kind == "method":
        proto = descriptor_pb2.MethodDescriptorProto()
        descriptor.CopyToProto(proto)
        return "a method", method_line(proto)
    if kind in ("field", "extension"):
        return ("an extension" if kind == "extension" else "a field"), field_text(descriptor,
                                                                                   syntax)
    if kind == "oneof":
        lines = [f"oneof {descriptor.name} {{"]
        for field in descriptor.fields:
            lines.append(f"  {field_text(field, syntax, in_oneof=True)}")
        lines.append("}")
        return "a one-of", "\n".join(lines)
    if kind == "enum value":
        return "an enum value", f"{descriptor.name} = {descriptor.number};"
    raise fail(f"descriptor has unrecognized type {kind}")


def field_text(field, syntax, in_oneof=False):
    parent = field.containing_type
    proto = proto_of(parent)
    for candidate in proto.field:
        if candidate.number == field.number:
            return field_line(candidate, syntax, list(proto.nested_type), in_oneof)
    return field.name


# --- invoking a method -------------------------------------------------------------------------


def read_requests(text, request_class, pool, allow_unknown):
    """Every JSON value of `text` (concatenated, whitespace between) as a request message."""
    from google.protobuf import json_format
    decoder = json.JSONDecoder()
    requests = []
    position = 0
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position == len(text):
            return requests
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise fail("error getting request data", error)
        message = request_class()
        try:
            json_format.ParseDict(value, message, ignore_unknown_fields=allow_unknown,
                                  descriptor_pool=pool)
        except json_format.ParseError as error:
            raise fail("error getting request data", error)
        requests.append(message)


class Printer:
    """grpcurl's JSON formatter: indented, lowerCamelCase, defaults only with -emit-defaults.
    Types inside google.protobuf.Any are fetched through reflection when first seen."""

    def __init__(self, source, emit_defaults):
        self.source = source
        self.emit_defaults = emit_defaults

    def format(self, message):
        from google.protobuf import json_format
        for _ in range(20):
            try:
                return json_format.MessageToJson(
                    message, including_default_value_fields=self.emit_defaults,
                    preserving_proto_field_name=False, indent=2,
                    descriptor_pool=self.source.pool, ensure_ascii=False)
            except TypeError as error:
                missing = str(error).rsplit("type_url:", 1)
                if len(missing) != 2:
                    raise
                self.source.load_symbol(missing[1].strip().rsplit("/", 1)[-1])
        raise fail("Failed to format response message")

    def format_any(self, type_url, value):
        """A status detail: an Any, or grpcurl's "@error"/"@value" when its type is unknown."""
        name = type_url.rsplit("/", 1)[-1]
        try:
            self.source.load_symbol("google.protobuf.Any")
            self.source.load_symbol(name)
            self.source.pool.FindMessageTypeByName(name)
        except (SymbolNotFound, KeyError, Exit):
            return json.dumps({"@type": type_url,
                               "@error": f"{name} is not recognized; see @value for raw binary "
                                         f"message data",
                               "@value": base64.b64encode(value).decode()}, indent=2)
        any_class = message_class(self.source.pool.FindMessageTypeByName("google.protobuf.Any"))
        return self.format(any_class(type_url=type_url, value=value))


def read_varint(data, position):
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, position


def parse_fields(data):
    """(field number, wire type, value) of a serialized message: varints and bytes only."""
    position = 0
    while position < len(data):
        key, position = read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = read_varint(data, position)
        elif wire_type == 2:
            length, position = read_varint(data, position)
            value, position = data[position:position + length], position + length
        elif wire_type == 1:
            value, position = data[position:position + 8], position + 8
        elif wire_type == 5:
            value, position = data[position:position + 4], position + 4
        else:
            raise ValueError(f"wire type {wire_type}")
        yield number, wire_type, value


def status_details(trailing_metadata):
    """(type_url, value) of each detail of the grpc-status-details-bin trailer (google.rpc.Status:
    code 1, message 2, repeated google.protobuf.Any details 3), read off the wire."""
    for key, value in trailing_metadata or ():
        if key == "grpc-status-details-bin":
            details = []
            try:
                for number, wire_type, blob in parse_fields(bytes(value)):
                    if number == 3 and wire_type == 2:
                        fields = {n: v for n, w, v in parse_fields(blob) if w == 2}
                        details.append((fields.get(1, b"").decode(), fields.get(2, b"")))
            except (ValueError, IndexError, UnicodeDecodeError):
                return []
            return details
    return []


def print_status(code, message, details, printer, format_error):
    if format_error:
        status = {"code": code, "message": message}
        if details:
            status["details"] = [json.loads(printer.format_any(*d)) for d in details]
        sys.stderr.write(json.dumps(status, indent=2, ensure_ascii=False))
        return
    out = [f"ERROR:\n  Code: {CODE_NAMES[code] if code < len(CODE_NAMES) else code}\n"
           f"  Message: {message}\n"]
    if details:
        out.append("  Details:\n")
        for i, detail in enumerate(details):
            prefix = f"  {i + 1})"
            lines = printer.format_any(*detail).split("\n")
            out.append(f"{prefix}\t{lines[0]}\n")
            for line in lines[1:]:
                out.append(f"{' ' * len(prefix)}\t{line}\n")
    sys.stderr.write("".join(out))


def invoke(grpc, channel, source, symbol, data, metadata, timeout, flags):
    if "/" in symbol:
        service_name, _, method_name = symbol.rpartition("/")
    else:
        service_name, _, method_name = symbol.rpartition(".")
    if not service_name or not method_name:
        raise fail(f'Error invoking method "{symbol}"',
                   f'given method name "{symbol}" is not in expected format: '
                   f'"service/method" or "service.method"')
    service_name = service_name.lstrip(".")
    try:
        source.load_symbol(service_name)
        service = source.pool.FindServiceByName(service_name)
    except (SymbolNotFound, KeyError):
        raise fail(f'Error invoking method "{symbol}"',
                   f'target server does not expose service "{service_name}"')
    method = service.methods_by_name.get(method_name)
    if method is None:
        raise fail(f'Error invoking method "{symbol}"',
                   f'service "{service_name}" does not include a method named "{method_name}"')
    request_class = message_class(method.input_type)
    response_class = message_class(method.output_type)
    printer = Printer(source, flags.get("emit-defaults", False))
    try:
        requests = read_requests(data, request_class, source.pool,
                                 flags.get("allow-unknown-fields", False))
    except Exit as error:
        raise fail(f'Error invoking method "{symbol}"', error.message)
    client_streaming = method.client_streaming
    server_streaming = method.server_streaming
    if not client_streaming:
        if len(requests) > 1:
            kind = "server-streaming" if server_streaming else "unary"
            raise fail(f'Error invoking method "{symbol}"',
                       f'method "{method.full_name}" is a {kind} RPC, but request data '
                       f'contained more than 1 message')
        if not requests:
            requests = [request_class()]  # grpcurl sends an empty request

    path = f"/{service.full_name}/{method.name}"
    kwargs = dict(request_serializer=request_class.SerializeToString,
                  response_deserializer=response_class.FromString)
    call_kwargs = dict(metadata=metadata, timeout=timeout)

    def emit(response):
        sys.stdout.write(printer.format(response) + "\n")
        sys.stdout.flush()

    try:
        if not client_streaming and not server_streaming:
            response = channel.unary_unary(path, **kwargs)(requests[0], **call_kwargs)
            emit(response)
        elif client_streaming and not server_streaming:
            response = channel.stream_unary(path, **kwargs)(iter(requests), **call_kwargs)
            emit(response)
        else:
            if server_streaming and not client_streaming:
                responses = channel.unary_stream(path, **kwargs)(requests[0], **call_kwargs)
            else:
                responses = channel.stream_stream(path, **kwargs)(iter(requests), **call_kwargs)
            for response in responses:
                emit(response)
    except grpc.RpcError as error:
        code = error.code().value[0] if error.code() is not None else 2
        details = status_details(error.trailing_metadata()
                                 if hasattr(error, "trailing_metadata") else None)
        print_status(code, error.details() or "", details, printer,
                     flags.get("format-error", False))
        raise Exit(STATUS_CODE_OFFSET + code)


def describe(source, symbols):
    for symbol in symbols:
        symbol = symbol.lstrip(".")
        try:
            kind, descriptor = source.find(symbol)
        except SymbolNotFound as error:
            raise fail(f'Failed to resolve symbol "{symbol}"', error)
        phrase, text = describe_text(kind, descriptor)
        if kind == "enum value":
            name = f"{descriptor.type.full_name}.{descriptor.name}"
        else:
            name = descriptor.full_name
        sys.stdout.write(f"{name} is {phrase}:\n{text}\n")


def make_channel(grpc, target, flags):
    options = []
    if flags.get("user-agent"):
        options.append(("grpc.primary_user_agent", flags["user-agent"]))
    if flags.get("max-msg-sz"):
        options.append(("grpc.max_receive_message_length", int(flags["max-msg-sz"])))
    server_name = flags.get("servername") or flags.get("authority")
    if flags.get("servername") and flags.get("authority") and \
            flags["servername"] != flags["authority"]:
        raise usage_error("Cannot specify different values for -servername and -authority.")
    if flags.get("plaintext"):
        if flags.get("cacert") or flags.get("cert") or flags.get("key"):
            raise usage_error("The -cacert, -cert and -key arguments are not used with "
                              "-plaintext.")
        if flags.get("authority"):
            options.append(("grpc.default_authority", flags["authority"]))
        return grpc.insecure_channel(target, options=options)

    def read(flag):
        if not flags.get(flag):
            return None
        try:
            with open(flags[flag], "rb") as f:
                return f.read()
        except OSError as error:
            raise fail("Failed to create TLS config", error)

    if bool(flags.get("cert")) != bool(flags.get("key")):
        raise usage_error("The -cert and -key arguments must be used together and both be "
                          "present.")
    credentials = grpc.ssl_channel_credentials(root_certificates=read("cacert"),
                                               private_key=read("key"),
                                               certificate_chain=read("cert"))
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
        options.append(("grpc.default_authority", server_name))
    return grpc.secure_channel(target, credentials, options=options)


def seconds(flags, name):
    if not flags.get(name):
        return None
    try:
        value = float(flags[name])
    except ValueError:
        raise usage_error(f'invalid value "{flags[name]}" for flag -{name}')
    return value if value > 0 else None


def run(argv):
    flags, args = parse_flags(argv)
    if flags.get("help") or flags.get("h"):
        sys.stderr.write(__doc__)
        raise Exit(0)
    for flag, message in UNSUPPORTED.items():
        if flags.get(flag):
            raise usage_error(f"grpcurl_lite: {message}")
    if flags.get("format", "json") != "json":
        raise usage_error("grpcurl_lite: only -format json is supported")
    if flags.get("use-reflection") is False:
        raise usage_error("No protoset files or proto files specified and -use-reflection set "
                          "to false.")
    if not args:
        raise usage_error("Too few arguments.")
    target = args.pop(0)
    if not args:
        raise usage_error("Too few arguments.")
    verb = args[0] if args[0] in ("list", "describe") else None
    if verb:
        args.pop(0)
        symbol = args.pop(0) if args else None
        if flags.get("d"):
            sys.stderr.write("Warning: The -d argument is not used with 'list' or 'describe' "
                             "verb.\n")
    else:
        symbol = args.pop(0)
    if args:
        raise usage_error("Too many arguments.")

    try:
        import grpc  # Debian's python3-grpcio: /usr/bin/python3
        import google.protobuf  # noqa: F401
    except ImportError as error:
        raise fail("grpcurl_lite needs grpcio and protobuf: run it with Debian's /usr/bin/python3 "
                   "(python3-grpcio, python3-protobuf)", error)
    max_time = seconds(flags, "max-time")
    # grpcurl's 10 s by default; $GRPCURL_LITE_CONNECT_TIMEOUT for tests on a loaded machine.
    connect_timeout = seconds(flags, "connect-timeout") or \
        float(os.environ.get("GRPCURL_LITE_CONNECT_TIMEOUT") or 10)
    headers = metadata_from_headers(flags["H"])
    reflect_metadata = tuple(headers + metadata_from_headers(flags["reflect-header"]))
    rpc_metadata = tuple(headers + metadata_from_headers(flags["rpc-header"]))

    data = flags.get("d", "")
    if data == "@":
        data = sys.stdin.read()

    with tempfile.TemporaryDirectory(prefix="grpcurl_lite_") as tmp:
        reflection_pb2 = load_reflection_module(
            os.environ.get("GRPCURL_LITE_PROTO_DIR") or DEFAULT_PROTO_DIR, tmp)
        channel = make_channel(grpc, target, flags)
        try:
            try:
                grpc.channel_ready_future(channel).result(
                    timeout=min(connect_timeout, max_time or connect_timeout))
            except grpc.FutureTimeoutError:
                raise fail(f'Failed to dial target host "{target}"', "context deadline exceeded")
            source = ReflectionSource(grpc, channel, reflection_pb2, reflect_metadata, max_time)
            if verb == "list" and symbol is None:
                try:
                    services = source.list_services()
                except Exit as error:
                    raise fail("Failed to list services", error.message)
                sys.stdout.write("".join(f"{s}\n" for s in services) or "(No services)\n")
            elif verb == "list":
                try:
                    kind, service = source.find(symbol)
                except SymbolNotFound as error:
                    raise fail(f'Failed to list methods for service "{symbol}"', error)
                if kind != "service":
                    raise fail(f'Failed to list methods for service "{symbol}"',
                               f'Service not found: {symbol}')
                methods = sorted(m.full_name for m in service.methods)
                sys.stdout.write("".join(f"{m}\n" for m in methods) or "(No methods)\n")
            elif verb == "describe":
                describe(source, [symbol] if symbol else source.list_services())
            else:
                invoke(grpc, channel, source, symbol, data, rpc_metadata, max_time, flags)
        finally:
            channel.close()


def main(argv):
    try:
        run(argv)
    except Exit as done:
        sys.stdout.flush()
        if done.message:
            sys.stderr.write(done.message.rstrip("\n") + "\n")
        return done.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
