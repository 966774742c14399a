#!/usr/bin/env python3
"""The CLI's connection errors are the real ones where /sys is hidden.

gRPC 1.51 (Debian's) reads errno after other calls that follow its non-blocking connect(). The
first absl lock that has to wait counts the CPUs, and where /sys is hidden (some sandboxes) glibc's
count leaves errno at ENOENT: when that fell inside gRPC's connect, a connection failed as "No
such file or directory" (19 of 6000 CLI runs here before client/connection.cc's workaround).

This runs the CLI RUNS times in a private mount namespace whose /sys is an empty tmpfs, each time
against a port that refuses connections (bound, never listening), and fails when any run's error
is not "Connection refused". Without the workaround it fails with probability about 0.998 at the
default 2000 runs. Exit code 77 (ctest SKIP_RETURN_CODE) when it cannot make the namespace: not
root, or no unshare.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys

SKIP = 77


def inner(cli, runs, port):
    subprocess.run(["mount", "-t", "tmpfs", "none", "/sys"], check=True)
    if os.listdir("/sys"):
        sys.exit("/sys is not empty after mounting a tmpfs on it")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    counts = {}
    examples = {}
    for _ in range(runs):
        result = subprocess.run([cli, f"--server=127.0.0.1:{port}", "--timeout=10", "info"],
                                env=env, capture_output=True, text=True, timeout=60)
        output = result.stdout + result.stderr
        kind = ("refused" if "Connection refused" in output else
                "ENOENT" if "No such file or directory" in output else "other")
        counts[kind] = counts.get(kind, 0) + 1
        examples.setdefault(kind, output.strip())
        if result.returncode == 0:
            sys.exit(f"the CLI succeeded against a port that refuses connections: {output}")
    print(f"{runs} runs without /sys: {counts}")
    for kind, text in examples.items():
        if kind != "refused":
            print(f"a run that failed otherwise ({kind}): {text}")
    return 0 if counts.get("refused", 0) == runs else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the manyshot CLI binary")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--inner_port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner_port:
        return inner(args.cli, args.runs, args.inner_port)
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        print("SKIPPED: needs root and unshare(1) to hide /sys in a private mount namespace")
        return SKIP
    # Bound but never listening: connect() to it is refused, and no other process can take it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        return subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                               os.path.abspath(__file__), f"--cli={args.cli}",
                               f"--runs={args.runs}", f"--inner_port={port}"]).returncode


if __name__ == "__main__":
    sys.exit(main())
