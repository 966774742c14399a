#!/usr/bin/python3
"""Reflection and client/examples/python_client.py against a real manyshot-server (Debian
python3-grpcio only).

Starts the server on free loopback ports with a temporary data directory and, through
manyshot_client's reflection helper (the stubs generated from
proto/grpc/reflection/v1alpha/reflection.proto at build time): checks that ManyShot, Health and
ServerReflection are listed, that every listed service resolves through reflection alone (as
grpcurl needs: it cannot call grpc.health.v1.Health/Check otherwise), that ManyShot has its nine
methods with the right streaming kinds and types, and that Health/Check called with message
classes built from the reflected descriptors alone answers SERVING. Then runs the example, which
must create its task and print two classifications, and stops the server with SIGTERM,
expecting exit status 0.

    /usr/bin/python3 tests/integration/python_reflection_test.py \
        --server_binary=build/server/manyshot-server --stubs_dir=build/client/python \
        --client_script=client/examples/python_client.py \
        --tokenizer_dir=/usr/local/share/manyshot/gpt2
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_client_test import REPO, Failure, Server, check, import_package  # noqa: E402

# name: (client streaming, server streaming, input type, output type)
METHODS = {
    "CreateTask": (True, True, "CreateTaskRequest", "CreateTaskResponse"),
    "GetTask": (False, False, "GetTaskRequest", "Task"),
    "ListTasks": (False, False, "ListTasksRequest", "ListTasksResponse"),
    "DeleteTask": (False, False, "DeleteTaskRequest", "DeleteTaskResponse"),
    "Classify": (False, False, "ClassifyRequest", "ClassifyResponse"),
    "StreamClassify": (True, True, "ClassifyRequest", "ClassifyResponse"),
    "Score": (False, False, "ScoreRequest", "ScoreResponse"),
    "Generate": (False, True, "GenerateRequest", "GenerateResponse"),
    "GetServerInfo": (False, False, "GetServerInfoRequest", "ServerInfo"),
}


def message_class(descriptor):
    """The Python class of a message descriptor, for old and new protobuf releases."""
    from google.protobuf import message_factory
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


def check_reflection(mc, address):
    with mc.Client(address, timeout=120) as client:
        reflection = client.reflection()
        services = reflection.services()
        for name in ["manyshot.v1.ManyShot", "grpc.health.v1.Health",
                     "grpc.reflection.v1alpha.ServerReflection"]:
            check(name in services, f"{name} not listed: {services}")
        for name in services:
            try:
                methods = reflection.methods(name)
                pool = reflection.pool(name)
                pool.FindServiceByName(name)
            except (mc.ManyshotError, KeyError) as error:
                raise Failure(f"reflection cannot resolve the listed service {name}: {error!r}")
            check(methods, f"{name}: no methods")

        methods = reflection.methods("manyshot.v1.ManyShot")
        check(sorted(methods) == sorted(METHODS), f"ManyShot methods {sorted(methods)}")
        for name, (client_streaming, server_streaming, request, response) in METHODS.items():
            m = methods[name]
            actual = (m.client_streaming, m.server_streaming, m.input_type, m.output_type)
            expected = (client_streaming, server_streaming, f".manyshot.v1.{request}",
                        f".manyshot.v1.{response}")
            check(actual == expected, f"{name}: {actual}, expected {expected}")

        # Health/Check with classes made from the reflected descriptors only.
        pool = reflection.pool("grpc.health.v1.Health")
        request_class = message_class(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest"))
        response_class = message_class(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse"))
        check_call = client.channel.unary_unary(
            "/grpc.health.v1.Health/Check", request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString)
        status = response_class.DESCRIPTOR.fields_by_name["status"].enum_type
        for service in ["", "manyshot.v1.ManyShot"]:
            response = check_call(request_class(service=service), timeout=60)
            name = status.values_by_number[response.status].name
            check(name == "SERVING", f"Health/Check of '{service}' answered {name}")
    print(f"reflection resolves all {len(services)} services; ManyShot has its "
          f"{len(METHODS)} methods; Health/Check: SERVING")


def check_example(script, stubs_dir, address):
    result = subprocess.run(["/usr/bin/python3", script, f"--server={address}",
                             f"--stubs_dir={stubs_dir}"],
                            capture_output=True, text=True, timeout=600)
    output = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    check(result.returncode == 0, f"the example exited {result.returncode}\n{output}")
    check(re.search(r"^task python-example-sst2: created=True, 40 demonstrations in \d+ groups$",
                    result.stdout, re.M), f"no task line\n{output}")
    lines = re.findall(r"^(negative|positive)\t(0\.\d{4}|1\.0000)\t(.+)$", result.stdout, re.M)
    check([text for _, _, text in lines] == ["an utterly delightful surprise",
                                             "a dull, lifeless two hours"],
          f"expected two classification lines\n{output}")
    check(all(float(p) >= 0.5 for _, p, _ in lines), f"the winner's probability < 0.5\n{output}")
    print("example: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server_binary", required=True)
    parser.add_argument("--stubs_dir", required=True, help="BUILD/client/python")
    parser.add_argument("--client_script",
                        default=os.path.join(REPO, "client", "examples", "python_client.py"))
    parser.add_argument("--package_dir", default=os.path.join(REPO, "client", "python"))
    parser.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    args = parser.parse_args()

    try:
        stubs_dir = os.path.abspath(args.stubs_dir)
        mc = import_package(stubs_dir, os.path.abspath(args.package_dir))
        with tempfile.TemporaryDirectory(prefix="manyshot_python_reflection_") as tmp:
            server = Server(args.server_binary, args.tokenizer_dir, tmp)
            try:
                check_reflection(mc, server.address)
                check_example(args.client_script, stubs_dir, server.address)
            except BaseException:
                print(f"server log:\n{server.log()}", file=sys.stderr)
                server.kill()
                raise
            server.stop()
    except Failure as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
