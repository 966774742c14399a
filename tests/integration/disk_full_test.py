#!/usr/bin/env python3
"""A full disk: creates are refused, existing tasks keep serving, writes come back without a restart.

The real server keeps its store on a small tmpfs, mounted in a private mount namespace so that
nothing outlives the test. It checks, in order:
  - creates until the disk is short of --min_free_disk_bytes: refused with RESOURCE_EXHAUSTED, a
    message naming the data directory's disk and the flag but never the data directory's path;
  - the disk filled to the last byte by someone else: gRPC health "manyshot.store" (and the gauge
    manyshot_store_writable) says NOT_SERVING while the server's own health stays SERVING, an
    existing task still classifies, listing works, and a delete goes through;
  - space freed: the store is writable again and a create succeeds, without a restart;
  - a start on a full disk: exit 1 with a message naming --min_free_disk_bytes, not a signal
    (RocksDB's assertion in Debian's build aborted the server before).
Exit code 77 (ctest SKIP_RETURN_CODE) without root or unshare(1).
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
RESERVE = 4 << 20
DISK = "40m"


class Failure(Exception):
    pass


def check(condition, what):
    if not condition:
        raise Failure(what)


def write_tsv(path, rows):
    words = "good bad fine dull great awful film movie plot actor scene story".split()
    with open(path, "w") as f:
        f.write("sentence\tlabel\n")
        for i in range(rows):
            f.write(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(10)))
            f.write(f"\t{i % 2}\n")


def fill(path):
    """Writes zeros to `path` until the filesystem is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096):
            block = b"\0" * size
            try:
                while True:
                    os.write(fd, block)
            except OSError:
                pass
    finally:
        os.close(fd)


class Server:
    def __init__(self, binary, data_dir, model_dir, work):
        self.port_file = os.path.join(work, "ports")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log = open(os.path.join(work, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [binary, "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
             f"--data_dir={data_dir}", f"--model_dir={model_dir}",
             f"--port_file={self.port_file}", f"--min_free_disk_bytes={RESERVE}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_started(self):
        deadline = time.time() + 120
        while time.time() < deadline:
            if os.path.exists(self.port_file):
                ports = dict(line.split("=") for line in open(self.port_file).read().split())
                self.grpc, self.metrics = int(ports["grpc"]), int(ports["metrics"])
                return
            check(self.proc.poll() is None, f"the server exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise Failure("the server did not start")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        check(self.proc.wait(timeout=60) == 0, "the server did not exit 0 on SIGTERM")


def cli(binary, server, *args, stdin=None):
    return subprocess.run([binary, f"--server=127.0.0.1:{server.grpc}", "--timeout=60", *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def create(binary, server, task, tsv):
    # Each task's own shuffle: equal tasks would share one KV entry and take no new space.
    seed = sum(task.encode())
    return cli(binary, server, "create", task, f"--file={tsv}", "--text_field=sentence",
               "--label_field=label", "--template=Sentence: {text}\\nLabel:",
               "--labels=negative,positive", f"--shuffle_seed={seed}")


def store_writable(server):
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics}/metrics", timeout=30).read()
    match = re.search(rb"^manyshot_store_writable (\S+)$", text, re.M)
    check(match is not None, "no manyshot_store_writable in /metrics")
    return float(match.group(1)) == 1.0


def wait_for(what, predicate, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise Failure(f"timed out waiting until {what}")


def run(args, work):
    model_dir = os.path.join(work, "model")
    # GPT-2-shaped, 4 layers of 128: about 4 KB of K/V per token, so a 60-demonstration task
    # takes about 6 MB of the 40 MB disk.
    subprocess.run([args.make_model, "--family=gpt2", "--layers=4", "--hidden_size=128",
                    f"--out={model_dir}", f"--tokenizer_dir={args.tokenizer_dir}"],
                   check=True, capture_output=True)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", mnt], check=True)
    data_dir = os.path.join(mnt, "data")
    big, small = os.path.join(work, "big.tsv"), os.path.join(work, "small.tsv")
    write_tsv(big, 60)
    write_tsv(small, 4)
    server = Server(args.server, data_dir, model_dir, work)
    server.wait_started()
    M = args.cli

    # Creates until the reserve is reached: refused cleanly, without the data directory's path.
    check(create(M, server, "kept", big).returncode == 0, "the first create failed")
    refused = None
    for i in range(40):
        result = create(M, server, f"more{i}", big)
        if result.returncode != 0:
            refused = result.stdout + result.stderr
            break
    check(refused is not None, "40 creates of ~6 MB each fit on a 40 MB disk")
    check("RESOURCE_EXHAUSTED" in refused, f"not RESOURCE_EXHAUSTED: {refused}")
    check("data directory's disk" in refused and "--min_free_disk_bytes" in refused,
          f"the refusal does not say what is short: {refused}")
    check(mnt not in refused, f"the refusal shows the data directory's path: {refused}")
    print(f"refused after {i} more creates: "
          f"{[line for line in refused.splitlines() if 'RESOURCE_EXHAUSTED' in line][0]}")

    # Someone else fills the disk to the last byte.
    filler = os.path.join(mnt, "filler")
    fill(filler)
    wait_for("health manyshot.store is NOT_SERVING",
             lambda: cli(M, server, "health", "manyshot.store").returncode == 1)
    check(not store_writable(server), "manyshot_store_writable is 1 on a full disk")
    check(cli(M, server, "health").returncode == 0, "the server's own health is not SERVING")
    answer = cli(M, server, "classify", "kept", stdin="a fine film\n")
    check(answer.returncode == 0 and answer.stdout.split("\t")[0] in ("negative", "positive"),
          f"an existing task does not classify on a full disk: {answer.stdout}{answer.stderr}")
    listed = cli(M, server, "list")
    check(listed.returncode == 0 and "kept" in listed.stdout, f"list failed: {listed.stderr}")
    full = create(M, server, "onfull", small)
    check(full.returncode != 0 and "RESOURCE_EXHAUSTED" in full.stdout + full.stderr,
          f"a create on a full disk was not refused: {full.stdout}{full.stderr}")
    deleted = cli(M, server, "delete", "more0")
    check(deleted.returncode == 0, f"a delete on a full disk failed: {deleted.stderr}")

    # Space comes back: so do writes, without a restart.
    os.remove(filler)
    wait_for("health manyshot.store is SERVING",
             lambda: cli(M, server, "health", "manyshot.store").returncode == 0)
    check(store_writable(server), "manyshot_store_writable is 0 after space was freed")
    after = create(M, server, "after", small)
    check(after.returncode == 0, f"a create after freeing space failed: {after.stderr}")
    answer = cli(M, server, "classify", "after", stdin="a dull film\n")
    check(answer.returncode == 0, f"the new task does not classify: {answer.stderr}")
    check(server.proc.poll() is None, "the server exited")
    server.stop()

    # A start on a full disk: a clear exit 1.
    fill(filler)
    server = Server(args.server, data_dir, model_dir, work)
    code = server.proc.wait(timeout=120)
    log = open(os.path.join(work, "server.log"), errors="replace").read()
    check(code == 1, f"a start on a full disk exited {code} (1 expected): {log[-2000:]}")
    check("--min_free_disk_bytes" in log.splitlines()[-1], f"no clear message: {log[-2000:]}")
    print("full disk: refused, served, resumed; start on a full disk exits 1")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--make_model", required=True, help="make-tiny-model")
    parser.add_argument("--tokenizer_dir", required=True, help="GPT-2 vocab.json + merges.txt")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.inner:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            print("SKIPPED: needs root and unshare(1) to mount a small tmpfs in a private mount "
                  "namespace")
            return SKIP
        return subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                               os.path.abspath(__file__), "--inner"] + sys.argv[1:]).returncode
    work = tempfile.mkdtemp(prefix="manyshot-disk-full-")
    try:
        run(args, work)
        return 0
    except Failure as e:
        print(f"FAILED: {e}")
        log = os.path.join(work, "server.log")
        if os.path.exists(log):
            print("server log (last lines):\n" + open(log, errors="replace").read()[-3000:])
        return 1
    finally:
        subprocess.run(["umount", os.path.join(work, "mnt")], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
