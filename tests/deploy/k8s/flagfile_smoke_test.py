#!/usr/bin/python3
"""Runs the real manyshot-server with the flags a rendered manifest gives it, on loopback.

k8s_check.py checks flag names and value types; this shows the server accepts the whole set:
  1. `kubectl kustomize DIR`; the server Deployment's manyshot-server container and its volumes
     are laid out under a temporary directory (ConfigMap keys as files, the shared claim and
     emptyDirs as empty directories, the Secrets manyshot-tls and manyshot-auth made up here: a throwaway
     self-signed certificate for localhost, which also serves as client CA and client
     certificate, and a tokens file). Mount paths in the arguments and flagfiles are rewritten to
     those directories.
  2. The server starts with the container's args, then --listen_address=127.0.0.1:0
     --metrics_address=127.0.0.1:0 --port_file=... (later flags override the flagfiles'; the
     test never listens beyond loopback).
  3. What the kubelet and Prometheus would do: the readiness probe's check (grpc.health.v1 Check
     of its service over plaintext for a grpc probe; a TCP connect for tcpSocket, plus the same
     health check over TLS with the client certificate), and GET /metrics.
  4. SIGTERM: the server must exit 0 within the pod's terminationGracePeriodSeconds.

  flagfile_smoke_test.py --server BIN --kustomize DIR [--kubectl kubectl]
Exit status 0 on success, 1 on failure, 77 when kubectl, python3-yaml or python3-grpcio is
missing.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "k8s_check"))
import k8s_check  # noqa: E402

try:
    import grpc  # Debian python3-grpcio
except ImportError:  # pragma: no cover - reported as a skip
    grpc = None

START_TIMEOUT_S = 60


def make_tls(directory):
    """A self-signed certificate for localhost in tls.crt/tls.key, and ca.crt (the same)."""
    os.makedirs(directory)
    crt, key = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", crt], check=True, capture_output=True)
    with open(crt, "rb") as f, open(os.path.join(directory, "ca.crt"), "wb") as out:
        out.write(f.read())


def health_check(port, service, tls_dir=None):
    """grpc.health.v1.Health/Check -> the status number (1 = SERVING)."""
    target = f"localhost:{port}"
    if tls_dir:
        def read(name):
            with open(os.path.join(tls_dir, name), "rb") as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(read("ca.crt"), read("tls.key"), read("tls.crt"))
        channel = grpc.secure_channel(target, creds)
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda b: b, response_deserializer=lambda b: b)
        name = service.encode()
        request = (b"\x0a" + bytes([len(name)]) + name) if name else b""
        response = check(request, timeout=10)
    # HealthCheckResponse { ServingStatus status = 1; }: absent = 0 (UNKNOWN).
    return response[1] if response[:1] == b"\x08" else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="the manyshot-server binary")
    parser.add_argument("--kustomize", required=True, metavar="DIR")
    parser.add_argument("--kubectl", default="kubectl")
    args = parser.parse_args()
    kubectl = shutil.which(args.kubectl)
    for missing, what in ((k8s_check.yaml is None, "python3-yaml"), (grpc is None, "python3-grpcio"),
                          (kubectl is None, args.kubectl)):
        if missing:
            print(f"SKIP: {what} is not installed")
            return k8s_check.SKIP
    reason = k8s_check.kustomize_too_old(kubectl)
    if reason:
        print(f"SKIP: {reason}")
        return k8s_check.SKIP
    text, problem = k8s_check.render(kubectl, args.kustomize)
    if problem:
        print(f"FAIL {problem}")
        return 1
    docs = k8s_check.load_yaml_documents(text, args.kustomize)
    workload = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet")
                    and d["spec"]["template"]["metadata"]["labels"].get(
                        "app.kubernetes.io/component") == "server")
    pod = workload["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c.get("command", [""])[0] == "manyshot-server")
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}

    with tempfile.TemporaryDirectory(prefix="manyshot-k8s-smoke-") as root:
        # 1. Lay out every mount; remember mountPath -> local directory.
        local = {}
        tls_dir = None
        for mount in container.get("volumeMounts", []):
            path = os.path.join(root, mount["name"])
            local[mount["mountPath"].rstrip("/")] = path
            volume = volumes.get(mount["name"], {})
            if "secret" in volume and volume["secret"]["secretName"] == "manyshot-tls":
                make_tls(path)
                tls_dir = path
                continue
            os.makedirs(path)
            if "secret" in volume and volume["secret"]["secretName"] == "manyshot-auth":
                with open(os.path.join(path, "tokens"), "w", encoding="utf-8") as f:
                    f.write("# TOKEN TENANT\nsmoke-test-token smoke\n")
            elif "secret" in volume:
                print(f"FAIL no stand-in for Secret {volume['secret']['secretName']!r}")
                return 1
            elif "configMap" in volume:
                for key, value in configmaps[volume["configMap"]["name"]]["data"].items():
                    with open(os.path.join(path, key), "w", encoding="utf-8") as f:
                        f.write(value)
        mount_re = re.compile(r"(?<=[=,])(" + "|".join(
            re.escape(m) for m in sorted(local, key=len, reverse=True)) + r")(?=/|,|$)")

        def relocate(value):
            return mount_re.sub(lambda m: local[m.group(1)], value)

        for path in local.values():  # flagfiles name mount paths too
            for name in os.listdir(path):
                file = os.path.join(path, name)
                if name.endswith("flags"):
                    with open(file, encoding="utf-8") as f:
                        lines = [relocate(line) for line in f.read().splitlines()]
                    with open(file, "w", encoding="utf-8") as f:
                        f.write("\n".join(lines) + "\n")

        # 2. Start it.
        port_file = os.path.join(root, "ports")
        command = [args.server] + [relocate(a) for a in container.get("args", [])] + [
            "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
            f"--port_file={port_file}"]
        log_path = os.path.join(root, "server.log")
        print("$", " ".join(command))
        with open(log_path, "w", encoding="utf-8") as log:
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        failures = []
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not os.path.exists(port_file) and server.poll() is None and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
            if not os.path.exists(port_file):
                failures.append(f"the server did not start (exit {server.poll()})")
            else:
                with open(port_file, encoding="utf-8") as f:
                    ports = dict(line.split("=") for line in f.read().split())
                grpc_port, metrics_port = int(ports["grpc"]), int(ports["metrics"])
                # 3. The probes, as the kubelet runs them, and a scrape.
                probe = container["readinessProbe"]
                if "grpc" in probe:
                    status = health_check(grpc_port, probe["grpc"].get("service", ""))
                    if status != 1:
                        failures.append(f"grpc readiness check: status {status}, not SERVING")
                    print(f"readiness (grpc, {probe['grpc'].get('service', '')!r}): {status}")
                else:
                    socket.create_connection(("127.0.0.1", grpc_port), timeout=5).close()
                    print("readiness (tcpSocket): connected")
                    if tls_dir:
                        status = health_check(grpc_port, "manyshot.v1.ManyShot", tls_dir)
                        if status != 1:
                            failures.append(f"health over TLS: status {status}, not SERVING")
                        print(f"health over TLS with the client certificate: {status}")
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                            timeout=10) as response:
                    body = response.read().decode()
                if "manyshot_" not in body:
                    failures.append("GET /metrics has no manyshot_ metrics")
        except Exception as e:  # noqa: BLE001 - any probe failure is a test failure
            failures.append(f"{type(e).__name__}: {e}")
        finally:
            # 4. SIGTERM, and the kubelet's patience.
            grace = pod.get("terminationGracePeriodSeconds", 30)
            started = time.monotonic()
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
            try:
                code = server.wait(timeout=grace)
                print(f"SIGTERM: exit {code} after {time.monotonic() - started:.1f} s (grace {grace} s)")
                if code != 0 and not failures:
                    failures.append(f"exit {code} after SIGTERM")
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
                failures.append(f"still running {grace} s after SIGTERM (the kubelet would kill it)")
        if failures:
            with open(log_path, encoding="utf-8") as f:
                print("server log (last lines):\n" + "".join(f.readlines()[-20:]))
            for failure in failures:
                print(f"FAIL {failure}")
            return 1
    print(f"ok: manyshot-server runs with the flags of {args.kustomize}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
