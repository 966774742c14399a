#!/usr/bin/python3
"""Builds the repository's Dockerfile (CPU target) and runs the server from the image's files.

There is no Docker daemon here and containers cannot be started (crun cannot set rlimits in this
sandbox), so the test does what a container runtime would, with real tools:
  1. a Debian 12 base image from `debootstrap --variant=minbase bookworm`, imported with
     `podman import` as localhost/debian:bookworm-slim (in a private podman storage under a
     temporary directory);
  2. `podman build --isolation=chroot --format docker --build-arg BASE_IMAGE=...` of the
     Dockerfile's default (CPU) target;
  3. checks of the image configuration: non-root user 10001, the /data volume, EXPOSE 50051 and
     9464, the entrypoint/command, and a HEALTHCHECK that runs the image's own CLI;
  4. `podman image mount`, then, in private mount and network namespaces (`unshare`), the image's
     root filesystem bound read-only with a writable /data and /tmp (as deploy/k8s runs it), /proc
     and a read-only /sys (as every container runtime gives), and
     the image's ENTRYPOINT + CMD started with `chroot --userspec=10001:10001` in its WORKDIR:
     the server on its container defaults, listening on 0.0.0.0 inside that network namespace
     (only loopback exists there);
  5. through `nsenter` into that namespace: the HEALTHCHECK command until it passes, gRPC
     reflection (the Python client package's, client/python), a task created and
     classified with the image's CLI, `manyshot eval --plot` drawing its text with a font file
     of the image (the matches FC_DEBUG=1 makes the image's fontconfig print), and /metrics
     counting those calls; the server runs as uid 10001; SIGTERM stops it with exit status 0 and
     its state in /data is owned by uid 10001.

Needs root, podman, debootstrap, unshare/nsenter and network access to a Debian mirror and to
registry.npmjs.org (the image fetches the GPT-2 tokenizer files); scripts/setup.sh installs the
tools. It never skips: a missing tool fails with what to install.

    /usr/bin/python3 tests/deploy/docker/image_test.py --source_dir=REPO --stubs_dir=BUILD/client/python \
        [--base_tar=FILE]

--base_tar reuses a tarball of a debootstrap root (saves the ~2 minutes of debootstrap when
iterating); `--save_base_tar=FILE` writes one.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request

PROG = "docker_image_test"
T0 = time.monotonic()
BASE_IMAGE = "localhost/debian:bookworm-slim"
IMAGE = "localhost/manyshot:image-test"
UID = 10001
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


class TestFailure(Exception):
    pass


def log(message):
    print(f"[{time.monotonic() - T0:7.1f}s] {message}", flush=True)


def check(condition, message):
    if not condition:
        raise TestFailure(message)


def run(cmd, *, timeout, log_path=None, check_rc=True, **kwargs):
    """Runs cmd; its output goes to log_path (tail shown on failure) or is returned."""
    if log_path:
        with open(log_path, "ab") as out:
            result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                    **kwargs)
        if check_rc and result.returncode != 0:
            with open(log_path, "rb") as f:
                tail = f.read()[-6000:].decode(errors="replace")
            raise TestFailure(f"{' '.join(cmd[:4])} ... exited {result.returncode}; "
                              f"last output:\n{tail}")
        return result
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check_rc and result.returncode != 0:
        raise TestFailure(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout}\n"
                          f"{result.stderr}")
    return result


class Podman:
    """podman with a private storage under the test's temporary directory."""

    def __init__(self, tmp):
        self.args = ["podman", "--root", os.path.join(tmp, "storage"), "--runroot",
                     os.path.join(tmp, "runroot"), "--storage-driver", "overlay"]

    def __call__(self, *args, **kwargs):
        return run(self.args + list(args), **kwargs)


def require_tools():
    check(os.geteuid() == 0, "must run as root (debootstrap, podman storage, unshare, chroot)")
    missing = [t for t in ["podman", "debootstrap", "unshare", "nsenter", "chroot", "ip", "mount"]
               if shutil.which(t) is None]
    check(not missing, f"missing {', '.join(missing)}: run scripts/setup.sh (installs podman, "
          "debootstrap)")


def make_base(podman, tmp, args):
    tar_path = args.base_tar
    if not tar_path:
        rootfs = os.path.join(tmp, "rootfs")
        for attempt in (1, 2):
            # A mirror that drops a connection fails debootstrap, which has no retries of its
            # own: one more try from scratch, then the failure with debootstrap's output.
            log(f"debootstrap --variant=minbase bookworm ({args.mirror})"
                + (" again, after a failure" if attempt > 1 else ""))
            shutil.rmtree(rootfs, ignore_errors=True)
            result = run(["debootstrap", "--variant=minbase", "bookworm", rootfs, args.mirror],
                         timeout=1200, log_path=os.path.join(tmp, "debootstrap.log"),
                         check_rc=attempt > 1)
            if result.returncode == 0:
                break
        tar_path = os.path.join(tmp, "rootfs.tar")
        run(["tar", "-C", rootfs, "-cf", tar_path, "."], timeout=600)
        shutil.rmtree(rootfs)
        if args.save_base_tar:
            shutil.copyfile(tar_path, args.save_base_tar)
    log(f"podman import {tar_path} {BASE_IMAGE}")
    podman("import", tar_path, BASE_IMAGE, timeout=600)


def build_image(podman, tmp, args):
    log("podman build --isolation=chroot (CPU target; compiles manyshot-server and manyshot)")
    build_log = os.path.join(tmp, "build.log")
    start = time.monotonic()
    podman("build", "--isolation=chroot", "--format", "docker", "--pull=never",
           "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
           "--build-arg", f"BUILD_JOBS={os.cpu_count() or 2}",
           # This machine's CAs (a TLS-intercepting proxy's included) for the tokenizer download.
           *(["--secret", f"id=ca_bundle,src={CA_BUNDLE}"] if os.path.isfile(CA_BUNDLE) else []),
           "-t", IMAGE, "-f", os.path.join(args.source_dir, "Dockerfile"), args.source_dir,
           timeout=args.build_timeout, log_path=build_log)
    log(f"image built in {time.monotonic() - start:.0f} s")


def check_config(podman):
    info = json.loads(podman("image", "inspect", IMAGE, timeout=60).stdout)[0]
    config = info.get("Config") or {}
    log(f"image config: User={config.get('User')} Entrypoint={config.get('Entrypoint')} "
        f"Cmd={config.get('Cmd')} WorkingDir={config.get('WorkingDir')}")
    check(config.get("User") == f"{UID}:{UID}", f"image user {config.get('User')!r}, want non-root "
          f"{UID}:{UID}")
    ports = set((config.get("ExposedPorts") or {}).keys())
    check({"50051/tcp", "9464/tcp"} <= ports, f"ExposedPorts {sorted(ports)} lack 50051 and 9464")
    check("/data" in (config.get("Volumes") or {}), f"Volumes {config.get('Volumes')} lack /data")
    check(config.get("Entrypoint") == ["manyshot-server"], "entrypoint is not manyshot-server")
    check(config.get("Cmd"), "no CMD (the container defaults)")
    # podman reports the docker-format HEALTHCHECK at the top level, docker under Config.
    health = (info.get("Healthcheck") or config.get("Healthcheck") or {}).get("Test") or []
    check(len(health) >= 2 and health[0] == "CMD" and health[1] == "manyshot",
          f"HEALTHCHECK {health} does not run the image's manyshot CLI")
    size_mb = info.get("Size", 0) / 1e6
    log(f"image size {size_mb:.0f} MB")
    return config["Entrypoint"] + config["Cmd"], health[1:], config.get("WorkingDir") or "/"


def check_files(mnt):
    for path in ["usr/local/bin/manyshot-server", "usr/local/bin/manyshot",
                 "usr/local/share/manyshot/gpt2/vocab.json",
                 "usr/local/share/manyshot/gpt2/merges.txt", "etc/manyshot/server.flags"]:
        check(os.path.isfile(os.path.join(mnt, path)), f"/{path} missing from the image")
    st = os.stat(os.path.join(mnt, "data"))
    check(st.st_uid == UID and (st.st_mode & 0o777) == 0o700,
          f"/data is uid {st.st_uid} mode {oct(st.st_mode & 0o777)}, want {UID} 0700")
    for binary in ["/usr/local/bin/manyshot-server", "/usr/local/bin/manyshot"]:
        out = run(["chroot", mnt, "ldd", binary], timeout=60).stdout
        check("not found" not in out, f"{binary} lacks libraries in the image:\n{out}")
    for tool in ["cmake", "g++", "gcc", "curl"]:
        check(shutil.which(tool, path=f"{mnt}/usr/bin:{mnt}/usr/local/bin") is None,
              f"the runtime image carries the build tool {tool}")


class Container:
    """The image's entrypoint in private mount + network namespaces, as a runtime would run it."""

    def __init__(self, tmp, mnt, argv, workdir):
        self.root = os.path.join(tmp, "container-root")
        self.data = os.path.join(tmp, "data")
        os.makedirs(self.root)
        os.makedirs(self.data)
        os.chown(self.data, UID, UID)
        os.chmod(self.data, 0o700)
        self.log_path = os.path.join(tmp, "server.log")
        setup = " && ".join([
            "ip link set lo up",
            # The image's files, read-only; writable /data (the volume) and /tmp, as in deploy/k8s.
            f"mount --bind {mnt} {self.root}",
            f"mount -o remount,bind,ro {self.root}",
            f"mount --bind {self.data} {self.root}/data",
            f"mount -t tmpfs -o size=64m,mode=1777 tmpfs {self.root}/tmp",
            f"mount -t proc proc {self.root}/proc",
            # Read-only sysfs, as Docker, containerd and Kubernetes give every container. Without
            # it glibc's CPU count (asked for by the first absl lock that has to wait) fails to open
            # /sys/devices/system/cpu/online and leaves errno at ENOENT; gRPC 1.51's TCP client
            # reads errno after such calls, following connect(), and then fails the connection
            # with "No such file or directory" (seen here about 1 in 700 CLI runs, before the CLI
            # worked around it in client/connection.cc; client_hidden_sys_connect checks that).
            f"mount -t sysfs -o ro,nosuid,nodev,noexec sysfs {self.root}/sys",
            f"mount --rbind /dev {self.root}/dev",
        ])
        command = " ".join(f"'{a}'" for a in argv)
        script = (f"{setup} && exec chroot --userspec={UID}:{UID} {self.root} /usr/bin/env -i "
                  f"PATH=/usr/local/bin:/usr/bin:/bin HOME=/data /bin/sh -c "
                  f"\"cd {workdir} && exec {command}\"")
        with open(self.log_path, "wb") as out:
            # unshare(2) runs in this process before it forks: /proc/PID/ns/* are the container's.
            self.process = subprocess.Popen(
                ["unshare", "--mount", "--net", "--pid", "--fork", "--propagation", "private",
                 "/bin/sh", "-c", script], stdout=out, stderr=subprocess.STDOUT)

    def server_log(self):
        with open(self.log_path, "rb") as f:
            return f.read()[-6000:].decode(errors="replace")

    def nsenter(self, *cmd, timeout=60, check_rc=True, mount=False):
        ns = [f"--net=/proc/{self.process.pid}/ns/net"]
        if mount:
            ns.append(f"--mount=/proc/{self.process.pid}/ns/mnt")
        return run(["nsenter"] + ns + list(cmd), timeout=timeout, check_rc=check_rc)

    def in_image(self, *cmd, timeout=60, check_rc=True):
        """Runs one of the image's programs in the container, as its user."""
        return self.nsenter("chroot", f"--userspec={UID}:{UID}", self.root, *cmd,
                            timeout=timeout, check_rc=check_rc, mount=True)

    def server_pid(self):
        """The server: the process the namespace's init (unshare's child) became by exec."""
        with open(f"/proc/{self.process.pid}/task/{self.process.pid}/children") as f:
            children = f.read().split()
        check(len(children) == 1, f"unshare has children {children}")
        return int(children[0])

    def alive(self):
        return self.process.poll() is None

    def stop(self, timeout):
        if not self.alive():
            return self.process.returncode
        os.kill(self.server_pid(), signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise TestFailure(f"server did not exit within {timeout} s of SIGTERM")


def check_plot_fonts(container, cli, lines):
    """`manyshot eval --plot` in the image draws its text with a real font from the image.

    The image's CLI runs a small eval (1 and 4 shots, one sample, the 4 classified inputs as the
    test split) with FC_DEBUG=1, so the image's own libfontconfig prints every match cairo asks
    it for (the plot's "sans-serif", regular and bold). Without a font file to match, fontconfig
    answers "Null pattern" and cairo draws the text in its built-in stroked "twin" font instead.
    """
    test = os.path.join(container.data, "test.tsv")
    with open(test, "w") as f:
        f.write("\n".join([lines[0]] + lines[37:41]) + "\n")
    os.chown(test, UID, UID)
    # The container's environment (HOME=/data: fontconfig may keep its cache under /data/.cache).
    env = ["/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/data", "FC_DEBUG=1"]
    result = container.in_image(*env, *cli, "eval", "--train_file=/data/train.tsv",
                                "--test_file=/data/test.tsv",
                                "--template=Sentence: {text}\\nLabel:",
                                "--labels=negative,positive", "--shots=1,4", "--samples=1",
                                "--modes=structured", "--test_limit=4", "--plot=/data/plot.png",
                                timeout=300)
    out = result.stdout
    check("structured" in out and "plot in /data/plot.png" in out,
          f"eval printed no results table:\n{out[-3000:]}\n{result.stderr}")
    check("Null pattern" not in out,
          f"fontconfig in the image matched no font for the plot's text:\n{out[-3000:]}")
    fonts = sorted({line.split('"')[1] for line in out.splitlines()
                    if line.strip().startswith('file: "')})
    check(fonts, f"eval --plot asked fontconfig for no font (FC_DEBUG=1 printed no matches):\n"
          f"{out[-3000:]}")
    for font in fonts:
        # `test -s` inside the image, so that a symbolic link resolves there, not on the host.
        exists = container.in_image("/usr/bin/test", "-s", font, check_rc=False).returncode == 0
        check(font.startswith("/usr/share/fonts/") and exists,
              f"fontconfig matched {font}, which is not a font file in the image")
    with open(os.path.join(container.data, "plot.png"), "rb") as f:
        png = f.read()
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR",
          f"/data/plot.png is not a PNG ({len(png)} bytes)")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    check(width >= 100 and height >= 100, f"/data/plot.png is {width}x{height}")
    log(f"eval --plot: {width}x{height} PNG, text in {', '.join(fonts)}")


# Lists the services through reflection and describes ManyShot's Classify, with the Python client
# package (client/python) and its build-time stubs.
REFLECTION_CHECK = """
import sys
sys.path[:0] = sys.argv[1:3]
import manyshot_client
with manyshot_client.Client("127.0.0.1:50051", timeout=60) as client:
    reflection = client.reflection()
    for service in reflection.services():
        print(service)
    classify = reflection.methods("manyshot.v1.ManyShot")["Classify"]
    print(f"rpc Classify({classify.input_type.lstrip('.')}) returns "
          f"({classify.output_type.lstrip('.')})")
"""


def exercise(container, health_cmd, source_dir, stubs_dir):
    deadline = time.monotonic() + 300
    while True:
        check(container.alive(), f"server exited with {container.process.returncode}:\n"
              f"{container.server_log()}")
        result = container.in_image(*health_cmd, check_rc=False)
        if result.returncode == 0:
            break
        check(time.monotonic() < deadline,
              f"HEALTHCHECK {health_cmd} never passed:\n{result.stdout}{result.stderr}\n"
              f"{container.server_log()}")
        time.sleep(1)
    log(f"HEALTHCHECK passes: {result.stdout.strip()}")

    with open(f"/proc/{container.server_pid()}/status") as f:
        uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
    check(uids == [str(UID)] * 4, f"server runs as uids {uids}, want {UID}")

    # Reflection, with Debian's python3-grpcio from the host, over the container's loopback.
    out = container.nsenter("/usr/bin/python3", "-c", REFLECTION_CHECK,
                            os.path.join(source_dir, "client/python"), stubs_dir).stdout
    for name in ["manyshot.v1.ManyShot", "grpc.health.v1.Health",
                 "rpc Classify(manyshot.v1.ClassifyRequest) returns (manyshot.v1.ClassifyResponse)"]:
        check(name in out, f"reflection does not describe {name}:\n{out}")
    log("reflection describes manyshot.v1.ManyShot and grpc.health.v1.Health")

    # A real task through the image's CLI: the bundled SST-2 excerpt (36 demonstrations).
    with open(os.path.join(source_dir, "client/examples/sst2_small.tsv")) as f:
        lines = f.read().splitlines()
    train = os.path.join(container.data, "train.tsv")
    inputs = os.path.join(container.data, "inputs.txt")
    with open(train, "w") as f:
        f.write("\n".join(lines[:37]) + "\n")
    with open(inputs, "w") as f:
        f.write("\n".join(line.split("\t", 1)[1] for line in lines[37:41]) + "\n")
    for path in [train, inputs]:
        os.chown(path, UID, UID)
    cli = ["manyshot", "--server=127.0.0.1:50051", "--timeout=120"]
    out = container.in_image(*cli, "create", "image-test", "--file=/data/train.tsv",
                             "--template=Sentence: {text}\\nLabel:",
                             "--labels=negative,positive", timeout=300).stdout
    log(f"create: {out.strip().splitlines()[-1] if out.strip() else '(no output)'}")
    out = container.in_image(*cli, "--json", "classify", "image-test", "--file=/data/inputs.txt", "--format=text",
                             timeout=300).stdout
    answers = [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]
    check(len(answers) == 4, f"classify gave {len(answers)} answers for 4 inputs:\n{out}")
    for answer in answers:
        check(answer.get("label") in ("negative", "positive"), f"answer without a label: {answer}")
    log(f"classify: 4 answers, labels {[a['label'] for a in answers]}")

    check_plot_fonts(container, cli, lines)

    metrics = container.nsenter("/usr/bin/python3", "-c",
                                "import urllib.request,sys; sys.stdout.write(urllib.request."
                                "urlopen('http://127.0.0.1:9464/metrics', timeout=10).read()."
                                "decode())").stdout
    wanted = ['manyshot_build_info{', 'method="CreateTask"', 'method="Classify"',
              'manyshot_inputs_classified_total']
    for text in wanted:
        check(text in metrics, f"/metrics lacks {text}")
    log("/metrics on 0.0.0.0:9464 counts the CreateTask and Classify calls")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source_dir", required=True)
    parser.add_argument("--stubs_dir", required=True,
                        help="the Python client's generated stubs (BUILD/client/python)")
    parser.add_argument("--mirror", default=os.environ.get("MANYSHOT_DEBIAN_MIRROR",
                                                           "http://deb.debian.org/debian"))
    parser.add_argument("--base_tar", default="")
    parser.add_argument("--save_base_tar", default="")
    parser.add_argument("--build_timeout", type=int, default=3000)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    args.source_dir = os.path.abspath(args.source_dir)

    tmp = tempfile.mkdtemp(prefix="manyshot_image_test_", dir="/var/tmp")
    podman = Podman(tmp)
    container = None
    mounted = False
    try:
        require_tools()
        make_base(podman, tmp, args)
        build_image(podman, tmp, args)
        argv, health_cmd, workdir = check_config(podman)
        mnt = podman("image", "mount", IMAGE, timeout=120).stdout.strip()
        mounted = True
        check_files(mnt)
        log(f"image files checked ({mnt})")
        container = Container(tmp, mnt, argv, workdir)
        exercise(container, health_cmd, args.source_dir, os.path.abspath(args.stubs_dir))
        status = container.stop(timeout=60)
        check(status == 0, f"server exited {status} after SIGTERM:\n{container.server_log()}")
        owners = {os.stat(os.path.join(d, n)).st_uid
                  for d, dirs, files in os.walk(container.data) for n in dirs + files}
        check(owners == {UID}, f"files in /data owned by uids {owners}, want only {UID}")
        log("SIGTERM: exit 0; /data holds only uid 10001's files")
        print(f"{PROG}: PASS", flush=True)
        return 0
    except (TestFailure, subprocess.TimeoutExpired) as e:
        print(f"{PROG}: FAIL: {e}", file=sys.stderr, flush=True)
        if container is not None:
            print(f"--- server output ---\n{container.server_log()}", file=sys.stderr)
        return 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        if container is not None and container.alive():
            container.process.kill()
            container.process.wait()
        if mounted:
            podman("image", "unmount", "--all", timeout=120, check_rc=False)
        podman("rmi", "--all", "--force", timeout=300, check_rc=False)
        if args.keep:
            log(f"kept {tmp}")
        else:
            # Overlay mounts left by podman would make rmtree fail: unmount anything below tmp.
            mounts = run(["findmnt", "-rn", "-o", "TARGET"], timeout=30, check_rc=False).stdout
            for target in sorted((m for m in mounts.split() if m.startswith(tmp)), reverse=True):
                run(["umount", "-l", target], timeout=30, check_rc=False)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
