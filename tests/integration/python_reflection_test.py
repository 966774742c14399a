#!/usr/bin/python3
"""client/examples/python_client.py against a real manyshot-server (Debian python3-grpcio only).

Starts the server on free loopback ports with a temporary data directory, runs the example's
reflection part and checks that ManyShot and its nine methods are described and that every listed
service (grpc.health.v1.Health too) resolves through reflection alone, runs the full flow
(which must succeed, or, while the server lacks the RPCs, fail with UNIMPLEMENTED printed and exit
status 1), then stops the server with SIGTERM and expects exit status 0.

    /usr/bin/python3 tests/integration/python_reflection_test.py \
        --server_binary=build/server/manyshot-server \
        --client_script=client/examples/python_client.py \
        --tokenizer_dir=/usr/local/share/manyshot/gpt2
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

METHODS = ["CreateTask", "GetTask", "ListTasks", "DeleteTask", "Classify", "StreamClassify",
           "Score", "Generate", "GetServerInfo"]


def fail(message, *outputs):
    print(f"FAIL: {message}", file=sys.stderr)
    for output in outputs:
        print(output, file=sys.stderr)
    sys.exit(1)


def run_client(script, port, *extra):
    return subprocess.run(["/usr/bin/python3", script, f"--server=127.0.0.1:{port}", *extra],
                          capture_output=True, text=True, timeout=120)


def check_every_service_resolves(client_script, port, services):
    """Every listed service is resolvable through reflection alone (as grpcurl needs: it cannot
    call grpc.health.v1.Health/Check otherwise), and Health/Check answers SERVING when called
    with the reflected descriptors."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(client_script)))
    import grpc
    import python_client as client

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        reflection = client.Reflection(channel)
        for name in services:
            try:
                reflection.files_for(name)
            except (grpc.RpcError, LookupError) as error:
                fail(f"reflection cannot resolve the listed service {name}: {error}")
        pool = client.build_pool(reflection.files_for("grpc.health.v1.Health"))
        request_class = client.message_class(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest"))
        response_class = client.message_class(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse"))
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=request_class.SerializeToString,
                                    response_deserializer=response_class.FromString)
        for service in ["", "manyshot.v1.ManyShot"]:
            response = check(request_class(service=service), timeout=30)
            status = response_class.DESCRIPTOR.fields_by_name["status"].enum_type
            if status.values_by_number[response.status].name != "SERVING":
                fail(f"Health/Check of '{service}' answered {response}")
        print(f"reflection resolves all {len(services)} services; Health/Check: SERVING")
    finally:
        channel.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server_binary", required=True)
    parser.add_argument("--client_script", required=True)
    parser.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="manyshot_python_reflection_") as tmp:
        port_file = os.path.join(tmp, "ports")
        log_path = os.path.join(tmp, "server.log")
        with open(log_path, "w") as log:
            server = subprocess.Popen(
                [args.server_binary, "--listen_address=127.0.0.1:0",
                 "--metrics_address=127.0.0.1:0", f"--port_file={port_file}",
                 f"--data_dir={os.path.join(tmp, 'data')}",
                 f"--default_tokenizer_dir={args.tokenizer_dir}"],
                stdout=log, stderr=subprocess.STDOUT)
        try:
            port = None
            deadline = time.monotonic() + 120
            while port is None and time.monotonic() < deadline:
                if server.poll() is not None:
                    fail(f"server exited early with {server.returncode}", open(log_path).read())
                if os.path.exists(port_file):
                    match = re.search(r"^grpc=(\d+)$", open(port_file).read(), re.M)
                    port = int(match.group(1)) if match else None
                time.sleep(0.05)
            if port is None:
                fail("no port file", open(log_path).read())

            # Reflection: services and the ManyShot methods.
            result = run_client(args.client_script, port, "--reflection_only")
            if result.returncode != 0:
                fail(f"--reflection_only exited {result.returncode}", result.stdout,
                     result.stderr)
            out = result.stdout
            services = re.findall(r"^  (\S+)$", out, re.M)
            for name in ["manyshot.v1.ManyShot", "grpc.health.v1.Health"]:
                if name not in services:
                    fail(f"{name} not listed", out)
            described = re.findall(r"^  rpc (\w+)\(", out, re.M)
            if sorted(described) != sorted(METHODS):
                fail(f"methods {described}, expected {METHODS}", out)
            for line in ["rpc CreateTask(stream manyshot.v1.CreateTaskRequest) returns "
                         "(stream manyshot.v1.CreateTaskResponse)",
                         "rpc Classify(manyshot.v1.ClassifyRequest) returns "
                         "(manyshot.v1.ClassifyResponse)",
                         "rpc Generate(manyshot.v1.GenerateRequest) returns "
                         "(stream manyshot.v1.GenerateResponse)"]:
                if line not in out:
                    fail(f"missing '{line}'", out)
            print(f"reflection: {len(services)} services, ManyShot with {len(described)} methods")
            check_every_service_resolves(args.client_script, port, services)

            # The full flow: works, or reports the server's UNIMPLEMENTED and exits 1.
            result = run_client(args.client_script, port)
            if result.returncode == 0:
                if not re.search(r"^task python-example-sst2: ", result.stdout, re.M):
                    fail("no task line", result.stdout, result.stderr)
                if len(re.findall(r"^(negative|positive)\t[0-9.]+\t", result.stdout, re.M)) != 2:
                    fail("expected two classification lines", result.stdout, result.stderr)
                print("full flow: ok")
            elif result.returncode == 1 and re.search(
                    r"^python_client\.py: \w+: UNIMPLEMENTED: ", result.stderr, re.M):
                print(f"full flow: server lacks an RPC: {result.stderr.strip()}")
            else:
                fail(f"full flow exited {result.returncode}", result.stdout, result.stderr)
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                fail("server did not stop within 60 s of SIGTERM", open(log_path).read())
        if code != 0:
            fail(f"server exited {code} after SIGTERM", open(log_path).read())
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
