#!/usr/bin/python3
"""Checks deploy/proxy/haproxy.cfg.template with Debian's haproxy (`haproxy -c`).

Renders it with render-haproxy-cfg.sh for fixed replica addresses and for the Kubernetes form
(dns+NAME:PORT/SLOTS), has `haproxy -c` validate each render, and checks the settings the cluster
depends on: HTTP/2 to clients and replicas, consistent hashing on x-manyshot-task with a balance
factor, health checks that eject a dead replica. The router's ConfigMap file in deploy/k8s must be
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
    "option httpchk",
    "http-check expect status 200",
]


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
        if not any("proto h2" in line and "check-proto h2" in line and " check " in line + " "
                   for line in lines if line.startswith("default-server")):
            errors.append(f"{name}: replicas must be reached and checked over h2")

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
