#!/usr/bin/python3
"""End-to-end test of deploy/prometheus/rules.yml and deploy/grafana/manyshot-dashboard.json.

Starts the real manyshot-server (ephemeral ports, temporary data dir), drives a short load through
the real `manyshot` CLI (health, info, create, classify, stream classify, score, generate, get,
list, and a call that fails with NOT_FOUND), starts a real Prometheus (ephemeral port, temporary
storage, 1 s scrape and rule evaluation) that scrapes the server and loads rules.yml, then checks
through Prometheus's HTTP API that:
  * every rule in rules.yml is loaded and evaluates without error, and no alert fires;
  * every recording rule's expression, and the series it records, return a non-empty result;
  * every query of every dashboard panel (template variables substituted) returns a non-empty
    result;
  and that each of these gives a number (not NaN) for one series at least.
Python standard library only. Every process it starts is stopped on the way out, failure
included (and killed by the kernel should this script itself be killed: PR_SET_PDEATHSIG).

    prometheus_e2e_test.py --server=BUILD/server/manyshot-server --cli=BUILD/client/manyshot \
        --source_dir=REPO
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

PROG = "prometheus_e2e_test"
T0 = time.monotonic()


class TestFailure(Exception):
    pass


def log(message):
    print(f"[{time.monotonic() - T0:6.2f}s] {message}", flush=True)


def set_pdeathsig():
    # Runs in the child between fork and exec: die with the test process, however it ends.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def poll(what, deadline, step, fn):
    """Calls fn() until it returns a true value; fails with `what` at the deadline."""
    while True:
        result = fn()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TestFailure(f"timed out waiting for {what}")
        time.sleep(step)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError):
        return None, b""


class Processes:
    def __init__(self):
        self.procs = []

    def start(self, name, argv, log_path):
        log_file = open(log_path, "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                stderr=subprocess.STDOUT, preexec_fn=set_pdeathsig)
        log_file.close()
        self.procs.append((name, proc, log_path))
        return proc

    def stop_all(self):
        for name, proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc, _ in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"{name} (pid {proc.pid}) ignored SIGTERM for 10 s: SIGKILL")
                proc.kill()
                proc.wait()

    def dump_logs(self, lines=40):
        for name, _, path in self.procs:
            try:
                with open(path, "rb") as f:
                    tail = f.read().decode(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            print(f"----- last {len(tail)} lines of the {name} log ({path}) -----")
            for line in tail:
                print(line)


def start_server(args, tmp, procs, deadline):
    port_file = os.path.join(tmp, "ports")
    server = procs.start("manyshot-server", [
        args.server,
        f"--data_dir={os.path.join(tmp, 'data')}",
        "--listen_address=127.0.0.1:0",
        "--metrics_address=127.0.0.1:0",
        f"--port_file={port_file}",
        f"--default_tokenizer_dir={args.tokenizer_dir}",
        "--shutdown_grace_seconds=2",
    ], os.path.join(tmp, "server.log"))

    def ports():
        if server.poll() is not None:
            raise TestFailure(f"manyshot-server exited with status {server.returncode} at startup")
        try:
            with open(port_file) as f:
                found = dict(line.strip().split("=", 1) for line in f if "=" in line)
        except OSError:
            return None
        if "grpc" in found and "metrics" in found:
            return int(found["grpc"]), int(found["metrics"])
        return None

    return poll("the server's --port_file", deadline, 0.05, ports)


def start_prometheus(args, tmp, procs, metrics_port, deadline):
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [os.path.abspath(args.rules)],
        "scrape_configs": [{
            "job_name": "manyshot",
            "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
        }],
    }
    config_path = os.path.join(tmp, "prometheus.yml")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)  # JSON is YAML
    # The free port can be taken between probe and bind: then try another.
    for attempt in range(3):
        port = free_port()
        prometheus = procs.start(f"prometheus#{attempt}", [
            args.prometheus,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={os.path.join(tmp, f'tsdb{attempt}')}",
            f"--web.listen-address=127.0.0.1:{port}",
        ], os.path.join(tmp, f"prometheus{attempt}.log"))
        base = f"http://127.0.0.1:{port}"

        def ready():
            if prometheus.poll() is not None:
                return "exited"
            status, _ = http_get(base + "/-/ready", timeout=2)
            return "ready" if status == 200 else None

        if poll("Prometheus to be ready", deadline, 0.1, ready) == "ready":
            return base
        log(f"prometheus exited with status {prometheus.returncode} (port {port} taken?)")
    raise TestFailure("prometheus did not start (see its log below)")


def run_cli(args, grpc_port, *cli_args, expect_ok=True):
    argv = [args.cli, f"--server=127.0.0.1:{grpc_port}", "--timeout=30", *cli_args]
    result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=60, preexec_fn=set_pdeathsig)
    if (result.returncode == 0) != expect_ok:
        raise TestFailure(f"{' '.join(argv)}: exit status {result.returncode}"
                          f" (expected {'0' if expect_ok else 'non-zero'})\n"
                          f"stdout: {result.stdout}\nstderr: {result.stderr}")
    return result.stdout


def drive_load(args, grpc_port, tmp, first):
    task = "e2e-sst2"
    test_txt = os.path.join(tmp, "test.txt")
    if first:
        # As scripts/demo.sh: 36 demonstrations from the bundled excerpt, its last 4 as inputs.
        with open(args.examples) as f:
            lines = f.read().splitlines()
        train_tsv = os.path.join(tmp, "train.tsv")
        with open(train_tsv, "w") as f:
            f.write("\n".join(lines[:37]) + "\n")
        with open(test_txt, "w") as f:
            f.write("\n".join(line.split("\t", 1)[1] for line in lines[-4:]) + "\n")
        run_cli(args, grpc_port, "health")
        run_cli(args, grpc_port, "info")
        run_cli(args, grpc_port, "create", task, f"--file={train_tsv}",
                "--template=Sentence: {text}\\nLabel:", "--labels=negative,positive")
        run_cli(args, grpc_port, "get", task)
        run_cli(args, grpc_port, "list")
    run_cli(args, grpc_port, "classify", task, f"--file={test_txt}", "--format=text", "--batch=2")
    run_cli(args, grpc_port, "classify", task, f"--file={test_txt}", "--format=text", "--stream")
    run_cli(args, grpc_port, "score", task, "--input=a gripping , beautifully acted film",
            "--candidate= positive", "--candidate= negative")
    run_cli(args, grpc_port, "generate", task, "--input=a gripping , beautifully acted film",
            "--max_new_tokens=3")
    # A failing call: NOT_FOUND gives the error-ratio series a non-OK code.
    run_cli(args, grpc_port, "classify", "no-such-task", f"--file={test_txt}", "--format=text",
            expect_ok=False)


class Prometheus:
    def __init__(self, base):
        self.base = base

    def api(self, path, **params):
        url = f"{self.base}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get(url, timeout=10)
        if status is None:
            raise TestFailure(f"Prometheus did not answer {url}")
        try:
            reply = json.loads(body)
        except ValueError:
            raise TestFailure(f"{url}: HTTP {status}, not JSON: {body[:200]!r}")
        if reply.get("status") != "success":
            raise TestFailure(f"{url}: {reply.get('errorType')}: {reply.get('error')}")
        return reply["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]


def dashboard_queries(path):
    """(panel title, expr) for every target of every panel, template variables substituted."""
    with open(path) as f:
        dashboard = json.load(f)
    values = {
        "__rate_interval": "5m", "__interval": "15s", "__range": "1h",
        "__interval_ms": "15000", "__range_s": "3600", "__range_ms": "3600000",
    }
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") in ("query", "custom", "interval", "constant", "textbox"):
            values[var["name"]] = var.get("allValue") or ".*"
    # Importable: a ${DS_PROMETHEUS} input that every panel and target uses, unique panel ids.
    if "DS_PROMETHEUS" not in [i.get("name") for i in dashboard.get("__inputs", [])]:
        raise TestFailure(f"{path}: no DS_PROMETHEUS entry in __inputs")
    queries = []
    ids = []

    def walk(panels):
        for panel in panels:
            walk(panel.get("panels", []))
            ids.append(panel.get("id"))
            if panel.get("type") == "row":
                continue
            for where in [panel] + panel.get("targets", []):
                if where.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
                    raise TestFailure(f"panel {panel.get('title')!r}: datasource is "
                                      f"{where.get('datasource')}, not ${{DS_PROMETHEUS}}")
            for target in panel.get("targets", []):
                expr = target.get("expr", "")
                if not expr:
                    raise TestFailure(f"panel {panel.get('title')!r}: a target has no expr")
                for name in sorted(values, key=len, reverse=True):
                    for form in ("${%s}" % name, "[[%s]]" % name, "$" + name):
                        expr = expr.replace(form, values[name])
                if "$" in expr:
                    raise TestFailure(f"panel {panel.get('title')!r}: unknown variable in {expr}")
                queries.append((f"panel {panel.get('title')!r}", expr))

    walk(dashboard.get("panels", []))
    if None in ids or len(ids) != len(set(ids)):
        raise TestFailure(f"{path}: panel ids missing or not unique: {ids}")
    if not queries:
        raise TestFailure(f"{path}: no panel queries found")
    return queries


def rule_file_names(path):
    """(records, alerts) named in the rules file (a line scan: the stdlib has no YAML parser)."""
    with open(path) as f:
        text = f.read()
    records = re.findall(r"^\s*-?\s*record:\s*(\S+)\s*$", text, re.M)
    alerts = re.findall(r"^\s*-?\s*alert:\s*(\S+)\s*$", text, re.M)
    return records, alerts


def check(args, tmp, procs):
    deadline = T0 + args.deadline
    grpc_port, metrics_port = start_server(args, tmp, procs, deadline)
    log(f"manyshot-server up: grpc={grpc_port} metrics={metrics_port}")
    base = start_prometheus(args, tmp, procs, metrics_port, deadline)
    prom = Prometheus(base)
    log(f"prometheus ready at {base}")
    drive_load(args, grpc_port, tmp, first=True)
    log("load round 1 done")

    # Two scrapes at least (rate() needs two samples), then a second round of load so that the
    # counters grow between scrapes and rates are not all zero.
    poll("two successful scrapes of the server", deadline, 0.2,
         lambda: prom.query('count_over_time(up{job="manyshot"}[1m]) >= 2 '
                            'and up{job="manyshot"} == 1'))
    log("scraped")
    drive_load(args, grpc_port, tmp, first=False)
    log("load round 2 done")

    # Rules: all loaded, evaluated without error.
    records, alerts = rule_file_names(args.rules)
    if not records or not alerts:
        raise TestFailure(f"{args.rules}: found {len(records)} recording and {len(alerts)} "
                          "alerting rules")

    def rules_healthy():
        loaded = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        bad = [r for r in loaded if r.get("health") != "ok"]
        if bad:
            errors = [f"{r['name']}: {r.get('health')} {r.get('lastError', '')}" for r in bad]
            if any(r.get("health") == "err" for r in bad):
                raise TestFailure("rules fail to evaluate:\n  " + "\n  ".join(errors))
            return None
        return loaded

    loaded = poll("every rule to be evaluated", deadline, 0.2, rules_healthy)
    names = sorted(r["name"] for r in loaded)
    if names != sorted(records + alerts):
        raise TestFailure(f"Prometheus loaded {names}, rules.yml names {sorted(records + alerts)}")
    rule_exprs = [(f"recording rule {r['name']} (expr)", r["query"])
                  for r in loaded if r["type"] == "recording"]
    rule_series = [(f"recording rule {name} (recorded series)", name) for name in records]
    queries = rule_exprs + rule_series + dashboard_queries(args.dashboard)
    log(f"{len(loaded)} rules healthy; checking {len(queries)} queries "
        f"({len(rule_exprs)} rule expressions, {len(rule_series)} recorded series, "
        f"{len(queries) - 2 * len(rule_exprs)} dashboard targets)")

    # Each must return samples, and (once the second round's scrape is in) a number at least
    # once: NaN everywhere would mean a histogram or ratio that never saw its traffic.
    def has_number(result):
        return any(r.get("value", [0, "NaN"])[1] != "NaN" for r in result)

    pending = list(queries)
    last = {}
    while pending:
        still = []
        for what, expr in pending:
            result = prom.query(expr)  # a bad query fails at once (errorType bad_data)
            last[(what, expr)] = result
            if not has_number(result):
                still.append((what, expr))
        pending = still
        if pending and time.monotonic() > deadline:
            raise TestFailure(
                f"{len(pending)} of {len(queries)} queries return no data (or only NaN):\n" +
                "\n".join(f"  {what}: {expr}\n    -> {'only NaN' if last[q] else 'empty'}"
                          for q in pending for what, expr in [q]))
        if pending:
            time.sleep(0.25)
    log(f"all {len(queries)} queries return data")

    firing = [a for a in prom.api("alerts")["alerts"] if a.get("state") == "firing"]
    if firing:
        raise TestFailure("alerts firing on a healthy server: " +
                          ", ".join(f"{a['labels'].get('alertname')} {a['labels']}" for a in firing))

    # The scrape saw the load: one OK Classify at least, and the NOT_FOUND.
    for expr in ('manyshot_requests_total{method="Classify",code="OK"} > 0',
                 'manyshot_requests_total{method="Classify",code="NOT_FOUND"} > 0',
                 'manyshot_tokens_generated_total > 0', 'manyshot_inputs_classified_total >= 16'):
        poll(f"{expr} in Prometheus", deadline, 0.2, lambda: prom.query(expr))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="manyshot-server binary")
    parser.add_argument("--cli", required=True, help="manyshot CLI binary")
    parser.add_argument("--source_dir", required=True, help="repository root")
    parser.add_argument("--prometheus", default=None,
                        help="prometheus binary (default: from PATH, then /usr/bin/prometheus)")
    parser.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    parser.add_argument("--deadline", type=float, default=90,
                        help="seconds the whole test may take before it fails")
    args = parser.parse_args()
    args.rules = os.path.join(args.source_dir, "deploy/prometheus/rules.yml")
    args.dashboard = os.path.join(args.source_dir, "deploy/grafana/manyshot-dashboard.json")
    args.examples = os.path.join(args.source_dir, "client/examples/sst2_small.tsv")
    if args.prometheus is None:
        args.prometheus = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(args.prometheus, os.X_OK):
        print(f"{PROG}: FAILED: prometheus not found ({args.prometheus}); install the Debian "
              "package 'prometheus' (scripts/setup.sh does) or pass --prometheus=PATH",
              file=sys.stderr)
        return 1
    for path in (args.server, args.cli, args.rules, args.dashboard, args.examples):
        if not os.path.exists(path):
            print(f"{PROG}: FAILED: {path} does not exist", file=sys.stderr)
            return 1

    # SIGTERM/SIGINT/SIGHUP (e.g. ctest giving up) unwind through the cleanup below.
    def on_signal(signum, _frame):
        raise TestFailure(f"received signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)

    tmp = tempfile.mkdtemp(prefix="manyshot-prometheus-e2e-")
    procs = Processes()
    ok = False
    try:
        check(args, tmp, procs)
        ok = True
    except TestFailure as e:
        print(f"{PROG}: FAILED: {e}", file=sys.stderr, flush=True)
    except Exception:  # a bug here, or an OS error: still clean up and show the logs
        traceback.print_exc()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # let the cleanup finish
        procs.stop_all()
        if not ok:
            procs.dump_logs()
        shutil.rmtree(tmp, ignore_errors=True)
    log("PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
