#!/usr/bin/python3
"""Checks deploy/proxy/haproxy.cfg.template with Debian's haproxy (`haproxy -c`).

Renders it with render-haproxy-cfg.sh for fixed replica addresses and for the Kubernetes form
(dns+NAME:PORT/SLOTS), has `haproxy -c` validate each render, and checks the settings the cluster
depends on: HTTP/2 to clients and replicas, consistent hashing on x-manyshot-task with a balance
factor, health checks that eject a replica that is dead or not SERVING (the raw HTTP/2 bytes of
the check rebuilt here from the gRPC health protocol). The router's ConfigMap file in deploy/k8s must be
exactly the Kubernetes render, so the two never drift apart. Exit 77 (skip) without haproxy.

    /usr/bin/python3 tests/deploy/proxy/haproxy_cfg_test.py REPO_DIR [HAPROXY]
"""

import os
import shutil
import subprocess
import sys
import tempfile

ROUTER_CFG = "deploy/k8s/router/haproxy.cfg"
# How deploy/k8s/router/haproxy.cfg is rendered.
ROUTER_ARGS = ["--metrics", "0.0.0.0:8404", "0.0.0.0:50051",
               "dns+${MANYSHOT_REPLICAS_DNS}:50051/16"]
# What the router's Deployment sets (the headless Service's full name: HAProxy's resolvers use no
# search domains).
ROUTER_ENV = {"MANYSHOT_REPLICAS_DNS": "manyshot-headless.default.svc.cluster.local"}
REQUIRED_LINES = [
    "balance hdr(x-manyshot-task)",
    "hash-type consistent",
    "hash-balance-factor 150",
    "option tcp-check",
    "tcp-check connect",
    'tcp-check expect string grpc-status comment "no answer to grpc.health.v1.Health/Check"',
    # A HealthCheckResponse {status: SERVING}: gRPC framing (uncompressed, 2 bytes), field 1 = 1.
    'tcp-check expect min-recv 0 binary 00000000020801 comment "gRPC health is not SERVING"',
]


def frame(kind, flags, stream, payload):
    """One HTTP/2 frame: 24-bit length, type, flags, 31-bit stream id, payload."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + \
        payload


def literal(index, value):
    """HPACK literal header field without indexing, name from the static table, no Huffman."""
    assert len(value) < 127 and (index < 15 or index == 31)
    name = bytes([index]) if index < 15 else bytes([0x0F, index - 15])
    return name + bytes([len(value)]) + value


def health_check_request():
    """The check's request: preface, SETTINGS, HEADERS and DATA of Health/Check, as hex lines."""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0, b"")
    headers = (b"\x83\x86"  # :method POST, :scheme http (static table 3 and 6)
               + literal(1, b"localhost")  # :authority
               + literal(4, b"/grpc.health.v1.Health/Check")  # :path
               + literal(31, b"application/grpc")  # content-type
               + b"\x00\x02te\x08trailers")  # te: trailers (a new name)
    # END_HEADERS on HEADERS, END_STREAM on DATA; the body is an empty HealthCheckRequest.
    return [preface.hex(), frame(0x1, 0x4, 1, headers).hex(),
            frame(0x0, 0x1, 1, b"\x00\x00\x00\x00\x00").hex()]


def render(repo, args):
    script = os.path.join(repo, "deploy/proxy/render-haproxy-cfg.sh")
    return subprocess.run(["/bin/sh", script] + args, capture_output=True, text=True, check=False)


def haproxy_check(haproxy, text):
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write(text)
    try:
        result = subprocess.run([haproxy, "-c", "-f", f.name], capture_output=True, text=True,
                                check=False, env=dict(os.environ, **ROUTER_ENV))
    finally:
        os.unlink(f.name)
    return result.returncode, result.stdout + result.stderr


def main():
    repo = sys.argv[1]
    haproxy = sys.argv[2] if len(sys.argv) > 2 else (shutil.which("haproxy") or "/usr/sbin/haproxy")
    if not os.access(haproxy, os.X_OK):
        print("SKIP: haproxy is not installed (apt-get install haproxy)")
        return 77
    errors = []

    renders = {
        "fixed": ["127.0.0.1:50051", "127.0.0.1:50061", "127.0.0.1:50062", "127.0.0.1:50063"],
        "kubernetes": ROUTER_ARGS,
    }
    texts = {}
    for name, args in renders.items():
        result = render(repo, args)
        if result.returncode != 0:
            errors.append(f"{name}: render failed: {result.stderr.strip()}")
            continue
        text = texts[name] = result.stdout
        if "${MANYSHOT_PROXY" in text or "${MANYSHOT_REPLICAS}" in text:
            errors.append(f"{name}: an unrendered placeholder is left")
        code, output = haproxy_check(haproxy, text)
        if code != 0:
            errors.append(f"{name}: haproxy -c failed:\n{output}")
        lines = [line.strip() for line in text.splitlines()]
        for required in REQUIRED_LINES:
            if required not in lines:
                errors.append(f"{name}: missing `{required}`")
        if not any(line.startswith("bind ") and line.endswith("proto h2") for line in lines):
            errors.append(f"{name}: the gRPC frontend must bind with proto h2")
        if not any("proto h2" in line and " check " in line + " "
                   for line in lines if line.startswith("default-server")):
            errors.append(f"{name}: replicas must be reached over h2 and checked")
        sent = [line.split()[2] for line in lines if line.startswith("tcp-check send-binary ")]
        if sent != health_check_request():
            errors.append(f"{name}: the health check does not send grpc.health.v1.Health/Check "
                          f"as built here:\n  {sent}\n  {health_check_request()}")

    fixed = texts.get("fixed", "")
    for i, port in enumerate([50061, 50062, 50063], start=1):
        if f"server r{i} 127.0.0.1:{port}" not in fixed:
            errors.append(f"fixed: no server line r{i} for port {port}")
    if 'server-template r1- 16 "${MANYSHOT_REPLICAS_DNS}:50051" resolvers cluster_dns' not in \
            texts.get("kubernetes", ""):
        errors.append("kubernetes: no server-template over the headless Service")

    # The check can fail: a broken directive and a bad address are both refused.
    code, _ = haproxy_check(haproxy, fixed.replace("hash-type consistent", "hash-type nonsense"))
    if code == 0:
        errors.append("haproxy -c accepted `hash-type nonsense`: the check proves nothing")
    for bad in ("bad address", "dns+${X;rm}:50051/4", "dns+host:50051/many"):
        if render(repo, ["0.0.0.0:50051", bad]).returncode != 2:
            errors.append(f"the render script accepted the replica {bad!r}")

    router = os.path.join(repo, ROUTER_CFG)
    committed = open(router, encoding="utf-8").read() if os.path.exists(router) else None
    if committed != texts.get("kubernetes"):
        errors.append(f"{ROUTER_CFG} is not the current render; regenerate it with\n  "
                      f"deploy/proxy/render-haproxy-cfg.sh {' '.join(ROUTER_ARGS)} > {ROUTER_CFG}")

    for message in errors:
        print(f"FAIL: {message}", file=sys.stderr)
    if not errors:
        print(f"ok: {len(texts)} renders valid for {haproxy}; {ROUTER_CFG} up to date")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
