#!/usr/bin/python3
"""client/python/manyshot_client against a real manyshot-server (Debian python3-grpcio only).

Starts the server on free loopback ports with a temporary data directory and bearer-token auth,
then through the package: health, server info, auth refusals, CreateTask (created, then the same
content again: not created; different content: ALREADY_EXISTS, then replaced), ListTasks over
pages, GetTask, Classify, StreamClassify (ordered, unordered, an in-band error), Score, Generate,
errors with their codes and field violations, a bad demonstration that must store nothing, the
client-side token refusal and loopback rule, the x-manyshot-task metadata of every per-task call
(seen by a recording gRPC server in this process), DeleteTask; then stops the server with SIGTERM
and expects exit status 0.

    /usr/bin/python3 tests/integration/python_client_test.py \
        --server_binary=build/server/manyshot-server --stubs_dir=build/client/python \
        --tokenizer_dir=/usr/local/share/manyshot/gpt2

--stubs_dir is BUILD/client/python, where the manyshot_python_stubs target generates the stubs.
python_reflection_test.py uses this file's Server too.
"""

import argparse
import concurrent.futures
import csv
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STUB_FILES = ["manyshot/v1/manyshot_pb2.py", "manyshot/v1/manyshot_pb2_grpc.py",
              "google/rpc/status_pb2.py", "google/rpc/error_details_pb2.py",
              "grpc/health/v1/health_pb2.py", "grpc/reflection/v1alpha/reflection_pb2.py"]
TOKEN = "python-client-test-token"
LABELS = ["negative", "positive"]
SPEC = {"input_template": "Review: {text}\nSentiment:", "labels": LABELS}


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def expect_error(cls, code_name, call, *args, **kwargs):
    """Calls call(*args, **kwargs), which must raise `cls` with status code `code_name`."""
    import manyshot_client
    try:
        call(*args, **kwargs)
    except manyshot_client.ManyshotError as error:
        check(isinstance(error, cls), f"{call.__name__}: {type(error).__name__} ({error}), "
                                      f"expected {cls.__name__}")
        actual = error.code.name if error.code is not None else None
        check(actual == code_name, f"{call.__name__}: code {actual}, expected {code_name}")
        return error
    raise Failure(f"{call.__name__}{args}: no error, expected {cls.__name__}")


def import_package(stubs_dir, package_dir):
    """manyshot_client from package_dir with the stubs of stubs_dir; a clear failure without
    them."""
    missing = [f for f in STUB_FILES if not os.path.isfile(os.path.join(stubs_dir, f))]
    if missing:
        raise Failure(f"the generated Python stubs are missing from --stubs_dir={stubs_dir} "
                      f"({', '.join(missing)}): build the manyshot_python_stubs target "
                      f"(client/python/CMakeLists.txt; part of every full build)")
    sys.path[:0] = [package_dir, stubs_dir]
    import manyshot_client
    check(os.path.samefile(manyshot_client.STUBS_DIR, stubs_dir),
          f"stubs imported from {manyshot_client.STUBS_DIR}, not {stubs_dir}")
    return manyshot_client


class Server:
    """manyshot-server on free loopback ports with a data directory in `tmp`, until stop()."""

    def __init__(self, binary, tokenizer_dir, tmp, *extra_flags):
        self.tmp = tmp
        self.log_path = os.path.join(tmp, "server.log")
        port_file = os.path.join(tmp, "ports")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [binary, "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
                 f"--port_file={port_file}", f"--data_dir={os.path.join(tmp, 'data')}",
                 f"--default_tokenizer_dir={tokenizer_dir}", *extra_flags],
                stdout=log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.monotonic() + 300  # the first start writes the default model
        while self.port is None and time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Failure(f"server exited early with {self.process.returncode}:\n"
                              f"{self.log()}")
            if os.path.exists(port_file):
                with open(port_file) as f:
                    match = re.search(r"^grpc=(\d+)$", f.read(), re.M)
                self.port = int(match.group(1)) if match else None
            time.sleep(0.05)
        if self.port is None:
            self.kill()
            raise Failure(f"no port file within 300 s:\n{self.log()}")
        self.address = f"127.0.0.1:{self.port}"

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-20000:]

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self):
        """SIGTERM; the server must exit with status 0 within 120 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure(f"server did not stop within 120 s of SIGTERM:\n{self.log()}")
        if code != 0:
            raise Failure(f"server exited {code} after SIGTERM:\n{self.log()}")


def sst2_demonstrations():
    with open(os.path.join(REPO, "client", "examples", "sst2_small.tsv"), newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [(row["text"], int(row["label"])) for row in rows]


def check_classification(c, index, where):
    check(c.index == index, f"{where}: index {c.index}, expected {index}")
    check(c.label in LABELS, f"{where}: label {c.label!r} is not a task label")
    check(LABELS[c.label_index] == c.label, f"{where}: label_index {c.label_index} is not "
                                            f"{c.label!r}")
    check(list(c.probabilities) == LABELS, f"{where}: probabilities for {list(c.probabilities)}")
    total = sum(c.probabilities.values())
    check(abs(total - 1) < 1e-6, f"{where}: probabilities sum to {total}")
    check(all(0 <= p <= 1 for p in c.probabilities.values()), f"{where}: {c.probabilities}")
    best = max(c.scores, key=lambda s: s.mean_logprob)
    check(best.label == c.label, f"{where}: {c.label} chosen, {best.label} scored highest")
    check(c.probability == c.probabilities[c.label], f"{where}: probability {c.probability}")
    check(c.input_tokens > 0, f"{where}: input_tokens {c.input_tokens}")
    check(c.calibrated_probabilities is None, f"{where}: calibrated without calibrate")


def test_connection_rules(mc):
    """The token rules, decided before any connection (nothing listens at these addresses)."""
    for server in ["127.0.0.1:1", "127.8.9.10:1", "localhost:1", "LOCALHOST", "[::1]:1", "::1",
                   "[::ffff:127.0.0.1]:1", "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:1",
                   "dns:localhost:1", "dns:///localhost:1", "dns://8.8.8.8/127.0.0.1:1",
                   "unix:/tmp/socket", "unix-abstract:manyshot"]:
        check(mc.is_loopback_server(server), f"{server} should count as loopback")
    for server in ["10.1.2.3:50051", "example.com:443", "[2001:db8::1]:1", "128.0.0.1:1",
                   "ipv4:127.0.0.1:1,10.0.0.1:2", "ipv4:", "dns://127.0.0.1", "localhost.com:1",
                   "0.0.0.0:1", "[::]:1"]:
        check(not mc.is_loopback_server(server), f"{server} should not count as loopback")

    error = expect_error(mc.ConfigurationError, None, mc.Client, "10.1.2.3:50051", token=TOKEN)
    check(isinstance(error, ValueError), "ConfigurationError should be a ValueError")
    check("loopback" in str(error) and "10.1.2.3:50051" in str(error) and "tls_ca_file" in str(
        error), f"token refusal: {error}")
    with tempfile.TemporaryDirectory(prefix="manyshot_python_client_rules_") as tmp:
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(f"  {TOKEN}\n")
        expect_error(mc.ConfigurationError, None, mc.Client, "example.com:50051",
                     token_file=token_file)
        saved = os.environ.get(mc.SERVER_ENV)
        os.environ[mc.SERVER_ENV] = "10.9.9.9:50051"
        try:
            error = expect_error(mc.ConfigurationError, None, mc.Client, token=TOKEN)
            check("10.9.9.9:50051" in str(error), f"MANYSHOT_SERVER not used: {error}")
            with mc.Client() as client:
                check(client.server == "10.9.9.9:50051", f"server {client.server}")
        finally:
            if saved is None:
                del os.environ[mc.SERVER_ENV]
            else:
                os.environ[mc.SERVER_ENV] = saved
        # With TLS the token may go anywhere (the channel connects lazily: nothing is sent here).
        ca = os.path.join(tmp, "ca.pem")
        with open(ca, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
        with mc.Client("10.1.2.3:50051", tls_ca_file=ca, token_file=token_file) as client:
            check(client.tls, "tls_ca_file given but no TLS")
            check(("authorization", f"Bearer {TOKEN}") in client.metadata(), "token_file")
        empty = os.path.join(tmp, "empty")
        open(empty, "w").close()
        for kwargs in [{"token": "has space"}, {"token": TOKEN, "token_file": token_file},
                       {"token_file": empty}, {"token_file": os.path.join(tmp, "missing")},
                       {"tls_cert_file": ca}, {"tls_server_name": "x"},
                       {"tls_ca_file": empty}]:
            expect_error(mc.ConfigurationError, None, mc.Client, "127.0.0.1:1", **kwargs)
    print("connection rules: ok")


def test_task_metadata(mc):
    """Every per-task call carries x-manyshot-task (and the token), as a task-affinity proxy
    needs: a gRPC server in this process records the metadata of each call and answers
    UNIMPLEMENTED."""
    import grpc
    calls = []

    class Recorder(grpc.GenericRpcHandler):
        def service(self, handler_call_details):
            calls.append((handler_call_details.method.rsplit("/", 1)[-1],
                          list(handler_call_details.invocation_metadata)))
            return None

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4),
                         handlers=[Recorder()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with mc.Client(f"127.0.0.1:{port}", token=TOKEN, timeout=60) as client:
            per_task = {
                "CreateTask": lambda: client.create_task("meta-task", SPEC, [("x", 0)]),
                "GetTask": lambda: client.get_task("meta-task"),
                "DeleteTask": lambda: client.delete_task("meta-task"),
                "Classify": lambda: client.classify("meta-task", "x"),
                "StreamClassify": lambda: list(client.stream_classify("meta-task", ["x"])),
                "Score": lambda: client.score("meta-task", [("x", ["a", "b"])]),
                "Generate": lambda: client.generate("meta-task", "x"),
            }
            other = {"GetServerInfo": client.server_info, "ListTasks": client.list_tasks}
            for name, call in {**per_task, **other}.items():
                expect_error(mc.UnimplementedError, "UNIMPLEMENTED", call)
    finally:
        server.stop(None)
    seen = {}
    for method, metadata in calls:
        seen[method] = metadata
    check(set(seen) == set(per_task) | set(other), f"methods called: {sorted(seen)}")
    for method, metadata in seen.items():
        tasks = [v for k, v in metadata if k == "x-manyshot-task"]
        expected = ["meta-task"] if method in per_task else []
        check(tasks == expected, f"{method}: x-manyshot-task {tasks}, expected {expected}")
        check(("authorization", f"Bearer {TOKEN}") in metadata, f"{method}: no bearer token")
    print(f"x-manyshot-task on all {len(per_task)} per-task calls: ok")


def test_against_server(mc, server):
    address = server.address
    client = mc.Client(address, token=TOKEN, timeout=300)

    # Health (no token needed) and server information.
    with mc.Client(address, timeout=120) as anonymous:
        check(anonymous.health() == "SERVING", "Health/Check of the server")
        check(anonymous.health("manyshot.v1.ManyShot") == "SERVING", "Health/Check of ManyShot")
        expect_error(mc.NotFoundError, "NOT_FOUND", anonymous.health, "no.such.Service")
        # Everything else needs the token.
        error = expect_error(mc.UnauthenticatedError, "UNAUTHENTICATED", anonymous.server_info)
        check("authorization" in error.message, f"unauthenticated: {error.message}")
    with mc.Client(address, token="wrong-token", timeout=120) as stranger:
        expect_error(mc.UnauthenticatedError, "UNAUTHENTICATED", stranger.list_tasks)
    info = client.server_info()
    check(info.version and info.model.model_type and info.backend.name,
          f"server info incomplete: {info}")
    check(info.model.vocab_size > 0 and info.model.layers > 0, f"model: {info.model}")
    check(info.limits.max_batch_inputs > 0 and info.limits.max_stream_inflight > 0,
          f"limits: {info.limits}")
    check(info.tasks == 0, f"{info.tasks} tasks on a new server")
    check(info.start_time is not None and info.start_time.timestamp() <= time.time() + 5,
          f"start_time {info.start_time}")
    print(f"health, server info: ok ({info.model.model_type}, {info.backend.name})")

    # CreateTask: the SST-2 sample in chunks of 7 (label indices), with progress.
    demonstrations = sst2_demonstrations()
    check(len(demonstrations) == 40, f"{len(demonstrations)} rows in sst2_small.tsv")
    progress = []
    created = client.create_task("sst2", SPEC, iter(demonstrations), chunk=7,
                                 on_progress=progress.append)
    task = created.task
    check(created.created and not created.replaced, f"first create: {created}")
    check(task.task_id == "sst2" and task.state == "READY", f"task: {task}")
    check(task.stats.demonstrations == 40 and task.stats.groups >= 1, f"stats: {task.stats}")
    check(len(task.stats.demonstrations_per_group) == task.stats.groups, f"stats: {task.stats}")
    check(task.stats.context_tokens > 0 and task.stats.cache_bytes > 0, f"stats: {task.stats}")
    check(task.spec["labels"] == LABELS and task.spec["input_template"] == SPEC[
        "input_template"], f"spec: {task.spec}")
    check(task.content_hash and task.create_time is not None, f"task: {task}")
    phases = [p.phase for p in progress]
    check("ENCODING" in phases, f"progress phases {phases}")
    check(max(p.demonstrations_received for p in progress) == 40, f"progress {progress}")
    again = client.create_task("sst2", SPEC, demonstrations, chunk=1000)
    check(not again.created and not again.replaced, f"same content again: {again}")
    check(again.task.content_hash == task.content_hash, "content hash changed")

    # A second task: mappings with label texts; different content is refused, then replaced.
    client.create_task("other", {**SPEC, "mode": "parallel"},
                       [{"text": "fine", "label": "positive"},
                        {"text": "poor", "label": "negative"}])
    error = expect_error(mc.AlreadyExistsError, "ALREADY_EXISTS", client.create_task, "other",
                         SPEC, [("a third text", "positive")])
    check("replace" in error.message, f"already exists: {error.message}")
    replaced = client.create_task("other", SPEC, [("a third text", "positive")], replace=True)
    check(replaced.replaced and replaced.task.stats.demonstrations == 1, f"replace: {replaced}")

    # ListTasks over pages of one, GetTask.
    listed = client.list_tasks(page_size=1)
    check([t.task_id for t in listed] == ["other", "sst2"], f"listed {listed}")
    got = client.get_task("sst2")
    check(got.content_hash == task.content_hash and got.stats.demonstrations == 40,
          f"get_task: {got}")
    check(client.server_info().tasks == 2, "server info counts 2 tasks")
    print("create (created, not again, replaced), list, get: ok")

    # Classify: one per input, in order, probabilities over the labels summing to 1.
    inputs = ["an utterly delightful surprise", {"text": "a dull, lifeless two hours"},
              demonstrations[0][0], mc.Input(text=demonstrations[1][0])]
    results = client.classify("sst2", inputs)
    check(len(results) == len(inputs), f"{len(results)} results for {len(inputs)} inputs")
    for i, result in enumerate(results):
        check_classification(result, i, f"classify[{i}]")
    parallel = client.classify("sst2", "an utterly delightful surprise", mode="parallel",
                               timeout=120)
    check(len(parallel) == 1, "one input, one result")
    check_classification(parallel[0], 0, "classify(mode=parallel)")
    # An input longer than the task's room: refused, or cut when the request asks for it.
    long_input = " ".join(["word"] * 2000)
    expect_error(mc.InvalidArgumentError, "INVALID_ARGUMENT", client.classify, "sst2", long_input)
    cut = client.classify("sst2", long_input, truncation="keep_end")[0]
    check(cut.truncated_tokens > 0, f"truncated_tokens {cut.truncated_tokens}")
    check(results[0].truncated_tokens == 0, "a short input is not cut")
    expect_error(mc.ConfigurationError, None, client.classify, "sst2", "x", mode="sideways")
    expect_error(mc.ConfigurationError, None, client.classify, "sst2", "x", no_such_option=1)
    print("classify: ok")

    # StreamClassify: ordered with a small window, then unordered; the same answers as Classify.
    texts = [text for text, _ in demonstrations[:20]]
    batch = client.classify("sst2", texts)
    streamed = list(client.stream_classify("sst2", iter(texts), max_inflight=3))
    check([c.index for c in streamed] == list(range(len(texts))), "stream order")
    for c, b in zip(streamed, batch):
        check_classification(c, b.index, f"stream_classify[{b.index}]")
        for label in LABELS:
            check(abs(c.probabilities[label] - b.probabilities[label]) < 1e-3,
                  f"stream_classify[{b.index}] {c.probabilities} vs classify {b.probabilities}")
    unordered = list(client.stream_classify("sst2", texts, ordered=False))
    check(sorted(c.index for c in unordered) == list(range(len(texts))), "unordered indices")
    # A refused input is answered in-band; the client raises it with its position.
    too_long = "x" * (info.limits.max_input_bytes + 1)
    error = expect_error(mc.InvalidArgumentError, "INVALID_ARGUMENT", lambda: list(
        client.stream_classify("sst2", ["fine", "ok", too_long, "good"])))
    check(error.request_index == 2, f"in-band error for request {error.request_index}")
    check(error.fields == ("inputs[0].text",), f"in-band field violations {error.fields}")
    print("stream_classify: ok")

    # Score.
    scored = client.score("sst2", [("a gripping film", [" positive", " negative"]),
                                   {"input": "a dull mess", "candidates": [" a", " b", " c"]},
                                   {"text": "fine", "candidates": [" yes"]}])
    check([len(s.candidates) for s in scored] == [2, 3, 1], f"score: {scored}")
    for s in scored:
        total = sum(c.probability for c in s.candidates)
        check(abs(total - 1) < 1e-6, f"score probabilities sum to {total}")
        best = max(range(len(s.candidates)), key=lambda i: s.candidates[i].mean_logprob)
        check(s.best_index == best and s.best == s.candidates[best].candidate, f"score {s}")
    check([c.candidate for c in scored[0].candidates] == [" positive", " negative"], "candidates")
    print("score: ok")

    # Generate: greedy is deterministic; the streamed tokens make up the result.
    streamed_tokens = []
    generation = client.generate("sst2", "a gripping film", max_new_tokens=8, stop_at_eos=False,
                                 on_token=streamed_tokens.append)
    check(generation.finish_reason == "MAX_TOKENS", f"generation: {generation}")
    check(len(generation.token_ids) == 8 and generation.text, f"generation: {generation}")
    check([t.token_id for t in streamed_tokens] == generation.token_ids, "streamed token ids")
    check("".join(t.text for t in streamed_tokens) == generation.text, "streamed token texts")
    check(math.isfinite(generation.sum_logprob) and generation.sum_logprob < 0,
          f"sum_logprob {generation.sum_logprob}")
    again = client.generate("sst2", {"text": "a gripping film"}, max_new_tokens=8,
                            stop_at_eos=False)
    check(again.token_ids == generation.token_ids, "greedy generation is not deterministic")
    beam = client.generate("sst2", "a gripping film", strategy="beam", beam_width=2,
                           max_new_tokens=4, stop_at_eos=False)
    check(0 < len(beam.token_ids) <= 4 and beam.text, f"beam: {beam}")
    print(f"generate: ok ({generation.text!r})")

    # Errors: codes, reasons and field violations from grpc-status-details-bin.
    error = expect_error(mc.NotFoundError, "NOT_FOUND", client.get_task, "no-such-task")
    check("no-such-task" in error.message and error.reason and error.domain == "manyshot.v1",
          f"not found: {error!r} domain {error.domain}")
    expect_error(mc.NotFoundError, "NOT_FOUND", client.classify, "no-such-task", "x")
    error = expect_error(mc.InvalidArgumentError, "INVALID_ARGUMENT", client.classify, "sst2",
                         ["fine", too_long])
    check(error.fields == ("inputs[1].text",), f"field violations {error.field_violations}")
    check("max_input_bytes" in error.field_violations[0].description, f"{error!r}")
    error = expect_error(mc.InvalidArgumentError, "INVALID_ARGUMENT", client.create_task, "new",
                         {"labels": LABELS}, [("x", 0)])
    check(error.fields == ("spec.input_template",), f"field violations {error.field_violations}")
    error = expect_error(mc.InvalidArgumentError, "INVALID_ARGUMENT", client.create_task,
                         "bad id!", SPEC, [("x", 0)])
    check(error.fields == ("task_id",), f"field violations {error.field_violations}")
    error = expect_error(mc.InvalidArgumentError, "INVALID_ARGUMENT", client.create_task, "new",
                         SPEC, [("x", 0), ("y", 7)])
    check(error.fields == ("demonstrations[1].label_index",), f"{error.field_violations}")
    # A demonstration the client cannot send fails the call before the server stores anything.
    bad = ((text, label) if i != 25 else (text, 0.5) for i, (text, label) in
           enumerate(demonstrations))
    error = expect_error(mc.ConfigurationError, None, client.create_task, "half", SPEC, bad,
                         chunk=5)
    check("demonstrations[25]" in str(error), f"bad demonstration: {error}")
    expect_error(mc.NotFoundError, "NOT_FOUND", client.get_task, "half")
    expect_error(mc.NotFoundError, "NOT_FOUND", client.get_task, "new")
    print("errors: ok")

    # DeleteTask.
    freed = client.delete_task("sst2")
    check(freed > 0, f"delete freed {freed} bytes")
    expect_error(mc.NotFoundError, "NOT_FOUND", client.get_task, "sst2")
    expect_error(mc.NotFoundError, "NOT_FOUND", client.delete_task, "sst2")
    check([t.task_id for t in client.list_tasks()] == ["other"], "after delete")
    client.delete_task("other")
    check(client.list_tasks() == [], "tasks left after deleting both")
    client.close()
    print("delete: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server_binary", required=True)
    parser.add_argument("--stubs_dir", required=True, help="BUILD/client/python")
    parser.add_argument("--package_dir", default=os.path.join(REPO, "client", "python"))
    parser.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    args = parser.parse_args()

    try:
        mc = import_package(os.path.abspath(args.stubs_dir), os.path.abspath(args.package_dir))
        test_connection_rules(mc)
        test_task_metadata(mc)
        with tempfile.TemporaryDirectory(prefix="manyshot_python_client_") as tmp:
            tokens = os.path.join(tmp, "tokens")
            with open(os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(f"{TOKEN} tenant-a\n")
            server = Server(args.server_binary, args.tokenizer_dir, tmp,
                            f"--auth_tokens_file={tokens}")
            try:
                test_against_server(mc, server)
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
