#!/usr/bin/python3
"""Every grpcurl command of client/examples/grpcurl.md against a real manyshot-server.

grpcurl itself is not installable here, so `grpcurl` is tools/grpcurl_lite/grpcurl_lite.py (a
work-alike that learns every type from the server's reflection) through a wrapper script on PATH.
The test starts manyshot-server on free loopback ports with a temporary data directory, takes
every ```sh block of the document, splits it into commands (quotes, `\\` continuations and
here-documents as the shell reads them), rewrites 127.0.0.1:50051 to the test server and runs the
commands one by one with bash, in document order (later ones use the task created earlier).

Each command must exit 0, unless the comment lines right above it say "exit status N". Then its
output is checked for what the document promises: Health answers SERVING, `list` shows the
services, `describe` the ManyShot methods and TaskSpec fields, CreateTask ends with a result with
"created": true and all the demonstrations sent, Classify/StreamClassify answer one result per
input with one of the task's labels, Score ranks the candidates sent, Generate streams tokens then
a result, GetTask/ListTasks/DeleteTask see the task, and the failing GetTask prints exactly the
ERROR block the document shows. Beside the document's commands the test checks two claims of its
prose with grpcurl_lite: the same CreateTask again is not "created", and different content under
the same id fails with AlreadyExists; and it makes a second task so that ListTasks has a real
nextPageToken to put in place of the document's TOKEN placeholder.

The number of grpcurl commands run must equal the number of grpcurl commands anywhere in the
document's code blocks, so one in a block the test does not run (```bash, say) fails it.
Commands that are not grpcurl: `NAME=value` assignments are kept for the later commands; the
python_client.py example is run by the python_reflection test (tests/integration) and skipped
here; anything else fails the test. At the end the server gets SIGTERM and must exit 0.

    /usr/bin/python3 tests/client/grpcurl_doc_test.py \\
        --server_binary=build/server/manyshot-server \\
        --doc=client/examples/grpcurl.md --proto_dir=proto \\
        --grpcurl_lite=tools/grpcurl_lite/grpcurl_lite.py \\
        --tokenizer_dir=/usr/local/share/manyshot/gpt2
"""

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DOC_ADDRESS = "127.0.0.1:50051"
COMMAND_TIMEOUT = 300  # seconds; generous, so that only a hung command fails on a loaded machine
MANYSHOT_METHODS = ["Classify", "CreateTask", "DeleteTask", "Generate", "GetServerInfo",
                    "GetTask", "ListTasks", "Score", "StreamClassify"]
STREAMING = {"CreateTask": "stream .manyshot.v1.CreateTaskRequest ) returns ( stream "
                           ".manyshot.v1.CreateTaskResponse",
             "StreamClassify": "stream .manyshot.v1.ClassifyRequest ) returns ( stream "
                               ".manyshot.v1.ClassifyResponse",
             "Generate": ".manyshot.v1.GenerateRequest ) returns ( stream "
                         ".manyshot.v1.GenerateResponse"}
GRPCURL_WORD = re.compile(r"(?:^|(?<=[\s;|&(`]))grpcurl(?=\s)")
EXTRA_TASK = "grpcurl-doc-extra"  # sorts before the document's task, for ListTasks paging


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


# --- reading the document ---------------------------------------------------------------------


def fenced_blocks(text):
    """[(language, body, first body line number)] of the ``` blocks of a markdown text."""
    blocks = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = re.match(r"^\s*```\s*([\w+-]*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        start = i + 1
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            i += 1
        check(i < len(lines), f"line {start}: the ``` block is not closed")
        blocks.append((opening.group(1), "\n".join(lines[start:i]), start + 1))
        i += 1
    return blocks


class Command:
    def __init__(self, text, words_text, heredoc, line, comments):
        self.text = text  # as written, for bash
        self.words_text = words_text  # without continuations and here-document, for shlex
        self.heredoc = heredoc  # the here-document's body, or None
        self.line = line  # in the document
        self.comments = comments  # the comment lines right above it

    def words(self):
        return shlex.split(self.words_text, comments=True)

    def expected_status(self):
        for comment in self.comments:
            match = re.search(r"exit status (\d+)", comment)
            if match:
                return int(match.group(1))
        return 0


def split_commands(block, first_line):
    """The commands of a shell block, as bash would read them."""
    block += "\n"
    commands = []
    i, n = 0, len(block)
    line = first_line
    comments = []
    while i < n:
        # Between commands: blank lines (which end a comment) and comment lines.
        end = block.find("\n", i)
        end = n if end < 0 else end
        text = block[i:end].strip()
        if not text or text.startswith("#"):
            comments = comments + [text] if text else []
            i = end + 1
            line += 1
            continue
        while block[i] in " \t":
            i += 1
        start, start_line = i, line
        words = []  # the text without `\`-newlines and here-documents
        heredocs = []  # (delimiter, strip tabs)
        bodies = []
        quote = None
        while i < n:
            c = block[i]
            if quote == "'":
                if c == "'":
                    quote = None
                words.append(c)
                line += c == "\n"
                i += 1
                continue
            if quote == '"':
                if c == "\\" and i + 1 < n:
                    words.append(block[i:i + 2])
                    line += block[i + 1] == "\n"
                    i += 2
                    continue
                if c == '"':
                    quote = None
                words.append(c)
                line += c == "\n"
                i += 1
                continue
            if c in "'\"":
                quote = c
                words.append(c)
                i += 1
            elif c == "\\" and i + 1 < n:
                if block[i + 1] == "\n":
                    line += 1
                else:
                    words.append(block[i:i + 2])
                i += 2
            elif c == "#" and (i == start or block[i - 1] in " \t"):
                end = block.find("\n", i)
                i = n if end < 0 else end
            elif block.startswith("<<", i) and not block.startswith("<<<", i):
                match = re.match(r"<<(-?)\s*(?:'([^']*)'|\"([^\"]*)\"|([A-Za-z_0-9]+))",
                                 block[i:])
                check(match, f"line {line}: a here-document without a delimiter")
                delimiter = next(g for g in match.groups()[1:] if g is not None)
                heredocs.append((delimiter, match.group(1) == "-"))
                i += match.end()
            elif c == "\n":
                logical = "".join(words).rstrip()
                i += 1
                line += 1
                for delimiter, strip_tabs in heredocs:
                    body = []
                    while True:
                        check(i < n, f"line {start_line}: here-document {delimiter} not closed")
                        end = block.find("\n", i)
                        end = n if end < 0 else end
                        text = block[i:end]
                        i = end + 1
                        line += 1
                        if (text.lstrip("\t") if strip_tabs else text) == delimiter:
                            break
                        body.append(text)
                    bodies.append("\n".join(body) + "\n")
                heredocs = []
                if logical.endswith(("|", "&&", "||")):
                    words.append(" ")
                    continue
                break
            else:
                words.append(c)
                i += 1
        check(quote is None, f"line {start_line}: unterminated {quote}")
        check(not heredocs, f"line {start_line}: here-document at the end of the block")
        text = block[start:i].rstrip("\n")
        commands.append(Command(text, "".join(words).strip(), bodies[0] if bodies else None,
                                start_line, comments))
        comments = []
    return commands


def json_values(text):
    """The JSON values of `text`, one after another (grpcurl's output, or -d @ input)."""
    decoder = json.JSONDecoder()
    values = []
    i = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return values
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as error:
            raise Failure(f"not JSON at offset {i}: {error}\n{text}")
        values.append(value)


class GrpcurlArgs:
    """A grpcurl command line: flags, address, verb or method, symbol."""

    VALUE_FLAGS = {"H", "d", "rpc-header", "reflect-header", "cacert", "cert", "key",
                   "authority", "servername", "max-time", "connect-timeout", "format",
                   "user-agent", "max-msg-sz"}

    def __init__(self, words):
        check(words and words[0] == "grpcurl", f"not a grpcurl command: {words}")
        self.headers = []
        self.data = None
        self.flags = set()
        args = words[1:]
        while args and args[0].startswith("-"):
            flag = args.pop(0).lstrip("-")
            name, _, value = flag.partition("=")
            if name in self.VALUE_FLAGS and not _:
                value = args.pop(0)
            if name == "H":
                self.headers.append(value)
            elif name == "d":
                self.data = value
            self.flags.add(name)
        self.address = args[0] if args else None
        self.verb = args[1] if len(args) > 1 else None
        self.symbol = args[2] if len(args) > 2 else None

    def requests(self, heredoc):
        if self.data is None:
            return []
        return json_values(heredoc or "" if self.data == "@" else self.data)


# --- the server -------------------------------------------------------------------------------


class Server:
    """manyshot-server on free loopback ports with a data directory in `tmp`, until stop()."""

    def __init__(self, binary, tokenizer_dir, tmp):
        self.log_path = os.path.join(tmp, "server.log")
        port_file = os.path.join(tmp, "ports")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [binary, "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
                 f"--port_file={port_file}", f"--data_dir={os.path.join(tmp, 'data')}",
                 f"--default_tokenizer_dir={tokenizer_dir}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        port = None
        deadline = time.monotonic() + 300  # the first start writes the default model
        while port is None and time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Failure(f"server exited early with {self.process.returncode}:\n"
                              f"{self.log()}")
            if os.path.exists(port_file):
                with open(port_file) as f:
                    match = re.search(r"^grpc=(\d+)$", f.read(), re.M)
                port = int(match.group(1)) if match else None
            time.sleep(0.05)
        if port is None:
            self.kill()
            raise Failure(f"no port file within 300 s:\n{self.log()}")
        self.address = f"127.0.0.1:{port}"

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
        check(code == 0, f"server exited {code} after SIGTERM:\n{self.log()}")


# --- running and checking ---------------------------------------------------------------------


class Result:
    def __init__(self, command, script, process):
        self.command = command
        self.script = script
        self.status = process.returncode
        self.stdout = process.stdout
        self.stderr = process.stderr

    def describe(self):
        return (f"document line {self.command.line}:\n{self.script}\nexit status {self.status}"
                f"\n--- stdout:\n{self.stdout}\n--- stderr:\n{self.stderr}")

    def check(self, condition, message):
        if not condition:
            raise Failure(f"{message}\n{self.describe()}")

    def messages(self):
        try:
            return json_values(self.stdout)
        except Failure as failure:
            raise Failure(f"{failure}\n{self.describe()}")


class DocTest:
    def __init__(self, address, env, workdir, lite):
        self.address = address
        self.env = env
        self.workdir = workdir
        self.lite = lite
        self.prelude = []  # NAME=value assignments of the document, for the later commands
        self.labels = {}  # task id -> its labels, from CreateTask results
        self.grpcurl_runs = 0
        self.checked = []  # one line per command, for the summary

    def bash(self, command, script, stdin=None):
        process = subprocess.run(["bash", "--noprofile", "--norc", "-c", script],
                                 input=stdin, capture_output=True, text=True, env=self.env,
                                 cwd=self.workdir, timeout=COMMAND_TIMEOUT)
        return Result(command, script, process)

    def grpcurl(self, args, stdin=None):
        """grpcurl_lite itself, for the test's own calls beside the document's."""
        script = "grpcurl " + " ".join(shlex.quote(a) for a in args)
        return self.bash(Command(script, script, None, 0, []), script, stdin)

    def rewrite(self, text):
        return text.replace(DOC_ADDRESS, self.address)

    def run_command(self, command, next_block):
        words = command.words()
        check(words, f"line {command.line}: an empty command")
        if len(words) == 1 and re.match(r"^[A-Za-z_][A-Za-z_0-9]*=", words[0]) and \
                "$(" not in command.text and "`" not in command.text:
            self.prelude.append(self.rewrite(command.text))
            self.checked.append(f"line {command.line}: {command.text} (kept for later commands)")
            return None
        if words[0] == "/usr/bin/python3" and len(words) > 1 and \
                words[1] == "client/examples/python_client.py":
            self.checked.append(f"line {command.line}: python_client.py: skipped, run by the "
                                f"python_reflection test")
            return None
        check(words[0] == "grpcurl",
              f"line {command.line}: a command this test does not know how to run: "
              f"{command.text}")
        args = GrpcurlArgs(words)
        check(args.address == DOC_ADDRESS,
              f"line {command.line}: the address is {args.address}, not {DOC_ADDRESS}")
        text = self.rewrite(command.text)
        if "TOKEN" in text:
            text = text.replace("TOKEN", self.page_token())
        script = "\n".join(self.prelude + [text])
        result = self.bash(command, script)
        self.grpcurl_runs += len(GRPCURL_WORD.findall(command.text))
        expected = command.expected_status()
        result.check(result.status == expected,
                     f"exit status {result.status}, expected {expected}")
        what = self.check_output(args, command, result)
        if expected != 0:
            result.check(result.stdout == "", "output on stdout from a failed call")
            result.check(re.match(r"ERROR:\n  Code: \w+\n  Message: .+\n", result.stderr),
                         "no grpcurl ERROR block on stderr")
            if next_block is not None and next_block[0] == "" and \
                    next_block[1].startswith("ERROR:"):
                shown = self.rewrite(next_block[1]).rstrip("\n")
                result.check(result.stderr.rstrip("\n") == shown,
                             f"stderr differs from the document's ERROR block (line "
                             f"{next_block[2]}):\n{shown}")
                what += "; stderr is the document's ERROR block"
        name = f"{args.verb} {args.symbol}" if args.symbol else args.verb
        self.checked.append(f"line {command.line}: {name}: exit {result.status}; {what}")
        return result

    def page_token(self):
        """A real nextPageToken: the first page of one task (there are two, see EXTRA_TASK)."""
        result = self.grpcurl(["-plaintext", "-d", '{"page_size": 1}', self.address,
                               "manyshot.v1.ManyShot/ListTasks"])
        result.check(result.status == 0, "ListTasks of one task failed")
        [page] = result.messages()
        result.check(len(page.get("tasks", [])) == 1, "ListTasks page_size 1: not one task")
        result.check(page.get("nextPageToken"), "ListTasks page_size 1 of two tasks: no "
                                                "nextPageToken")
        self.first_page = [t["taskId"] for t in page["tasks"]]
        return page["nextPageToken"]

    # Checks by method ---------------------------------------------------------------------------

    def check_output(self, args, command, result):
        if result.status != 0:
            return "failed as documented"
        verb = args.verb
        if verb == "list":
            lines = result.stdout.splitlines()
            if args.symbol is None:
                for name in ["manyshot.v1.ManyShot", "grpc.health.v1.Health",
                             "grpc.reflection.v1alpha.ServerReflection"]:
                    result.check(name in lines, f"{name} not listed")
                return f"{len(lines)} services"
            if args.symbol == "manyshot.v1.ManyShot":
                result.check(lines == [f"manyshot.v1.ManyShot.{m}" for m in MANYSHOT_METHODS],
                             "not the nine ManyShot methods")
            result.check(lines and all(line.startswith(args.symbol + ".") for line in lines),
                         f"not methods of {args.symbol}")
            return f"{len(lines)} methods"
        if verb == "describe":
            return self.check_describe(args, result)
        service, _, method = verb.rpartition("/")
        requests = args.requests(command.heredoc)
        messages = result.messages()
        checker = getattr(self, f"check_{method}", None) if service == "manyshot.v1.ManyShot" \
            else None
        if verb == "grpc.health.v1.Health/Check":
            result.check(messages == [{"status": "SERVING"}], "Health is not SERVING")
            return "SERVING"
        if checker is None:
            result.check(messages, "no response")
            return f"{len(messages)} response(s), no check of its own"
        return checker(args, requests, messages, result)

    def check_describe(self, args, result):
        text = result.stdout
        symbol = args.symbol
        if symbol == "manyshot.v1.ManyShot":
            result.check(text.startswith("manyshot.v1.ManyShot is a service:\nservice ManyShot {"),
                         "not ManyShot's description")
            for method in MANYSHOT_METHODS:
                types = STREAMING.get(method)
                pattern = (rf"rpc {method} \( {re.escape(types)} \);" if types else
                           rf"rpc {method} \( \.manyshot\.v1\.\w+ \) returns \( "
                           rf"\.manyshot\.v1\.\w+ \);")
                result.check(re.search(pattern, text), f"no rpc {method} line as expected")
            return "nine rpc lines"
        if symbol == "manyshot.v1.TaskSpec":
            result.check(text.startswith("manyshot.v1.TaskSpec is a message:\nmessage TaskSpec {"),
                         "not TaskSpec's description")
            for field in ["input_template", "answer_template", "separator", "labels",
                          "alignment", "mode", "rescale_factor"]:
                result.check(re.search(rf"^  [\w .<>,]+ {field} = \d+;$", text, re.M),
                             f"no field {field}")
            return "TaskSpec fields"
        result.check(re.match(rf"{re.escape(symbol.lstrip('.'))} is (a|an|the) [\w -]+:\n", text),
                     "no 'SYMBOL is a KIND:' line")
        return "described"

    def check_GetServerInfo(self, args, requests, messages, result):
        [info] = messages
        result.check(info.get("version"), "no version")
        result.check(info.get("model", {}).get("vocabSize", 0) > 0, "no model vocab size")
        result.check(info.get("backend", {}).get("name"), "no backend name")
        result.check(info.get("limits", {}).get("maxBatchInputs", 0) > 0, "no limits")
        return f"model {info['model'].get('modelType')}, backend {info['backend']['name']}"

    def check_task_header(self, args, requests, result):
        ids = {r.get("task_id", r.get("taskId")) for r in requests} - {None}
        for task_id in ids:
            result.check(f"x-manyshot-task: {task_id}" in args.headers,
                         f"no x-manyshot-task header for {task_id}")
        return ids

    def check_CreateTask(self, args, requests, messages, result):
        self.check_task_header(args, requests, result)
        result.check(len(requests) >= 1 and "spec" in requests[0], "no spec in the requests")
        sent = sum(len(r.get("demonstrations", [])) for r in requests)
        result.check(messages and all("progress" in m for m in messages[:-1]),
                     "not progress events then one result")
        final = messages[-1].get("result")
        result.check(final and final.get("created") is True, 'no result with "created": true')
        task = final["task"]
        task_id = requests[0]["task_id"]
        result.check(task["taskId"] == task_id, f"the task is {task['taskId']}, not {task_id}")
        result.check(task["state"] == "TASK_STATE_READY", f"task state {task['state']}")
        result.check(task["stats"]["demonstrations"] == str(sent),
                     f"{task['stats']['demonstrations']} demonstrations, {sent} sent")
        result.check(task["spec"]["labels"] == requests[0]["spec"]["labels"], "other labels")
        self.labels[task_id] = task["spec"]["labels"]
        self.check_create_claims(args, requests, result)
        return f"created {task_id} with {sent} demonstrations after {len(messages) - 1} " \
               f"progress events"

    def check_create_claims(self, args, requests, result):
        """The prose under the CreateTask example: the same content again is not created;
        different content under the same id is ALREADY_EXISTS."""
        again = self.bash(result.command, result.script)
        again.check(again.status == 0, "the same CreateTask again failed")
        final = again.messages()[-1].get("result", {})
        again.check(final.get("task", {}).get("taskId") == requests[0]["task_id"] and
                    "created" not in final, 'the same content again: not the task without '
                                            '"created": true')
        changed = dict(requests[0], spec=dict(requests[0]["spec"], input_template="{text} ->"))
        other = self.grpcurl(["-plaintext", "-d", "@", self.address,
                              "manyshot.v1.ManyShot/CreateTask"], json.dumps(changed))
        other.check(other.status == 64 + 6 and "Code: AlreadyExists" in other.stderr,
                    "different content under the same id is not AlreadyExists (exit 70)")

    def check_classifications(self, result, task_id, inputs, results, where):
        labels = self.labels.get(task_id)
        result.check(labels, f"{where}: task {task_id} was not created by an earlier command")
        result.check(len(results) == len(inputs), f"{where}: {len(results)} results for "
                                                  f"{len(inputs)} inputs")
        for r in results:
            result.check(r.get("label") in labels, f"{where}: label {r.get('label')!r} is not "
                                                   f"one of {labels}")
            result.check(labels[r.get("labelIndex", 0)] == r["label"],
                         f"{where}: labelIndex {r.get('labelIndex', 0)} is not {r['label']}")
            scores = r.get("scores", [])
            result.check([s["label"] for s in scores] == labels, f"{where}: scores for "
                                                                 f"{[s['label'] for s in scores]}")
            total = sum(s.get("probability", 0) for s in scores)
            result.check(abs(total - 1) < 1e-6, f"{where}: probabilities sum to {total}")
            best = max(scores, key=lambda s: s.get("probability", 0))
            result.check(best["label"] == r["label"], f"{where}: {r['label']} chosen, "
                                                      f"{best['label']} most probable")
        return [r["label"] for r in results]

    def check_Classify(self, args, requests, messages, result):
        [request] = requests
        self.check_task_header(args, requests, result)
        [response] = messages
        labels = self.check_classifications(result, request["task_id"], request["inputs"],
                                            response.get("results", []), "Classify")
        return f"labels {labels}"

    def check_StreamClassify(self, args, requests, messages, result):
        self.check_task_header(args, requests, result)
        result.check(len(messages) == len(requests),
                     f"{len(messages)} responses to {len(requests)} requests")
        by_id = {m.get("requestId"): m for m in messages}
        result.check(sorted(by_id) == sorted(r["request_id"] for r in requests),
                     "the request ids answered are not those sent")
        for request in requests:
            response = by_id[request["request_id"]]
            result.check("error" not in response, f"request {request['request_id']}: error")
            self.check_classifications(result, request["task_id"], request["inputs"],
                                       response.get("results", []),
                                       f"request {request['request_id']}")
        return f"{len(messages)} responses, one per request"

    def check_Score(self, args, requests, messages, result):
        [request] = requests
        self.check_task_header(args, requests, result)
        [response] = messages
        results = response.get("results", [])
        result.check(len(results) == len(request["items"]), "not one result per item")
        for item, r in zip(request["items"], results):
            candidates = r.get("candidates", [])
            result.check([c["candidate"] for c in candidates] == item["candidates"],
                         "the candidates scored are not those sent, in order")
            total = sum(c.get("probability", 0) for c in candidates)
            result.check(abs(total - 1) < 1e-6, f"candidate probabilities sum to {total}")
            best = r.get("bestIndex", 0)
            result.check(candidates[best]["probability"] ==
                         max(c.get("probability", 0) for c in candidates),
                         f"bestIndex {best} is not the most probable candidate")
        return f"best candidates {[r.get('bestIndex', 0) for r in results]}"

    def check_Generate(self, args, requests, messages, result):
        [request] = requests
        self.check_task_header(args, requests, result)
        options = request.get("options", {})
        result.check(messages and "result" in messages[-1], "the last message is not the result")
        tokens = [m["token"] for m in messages[:-1]]
        result.check(all("token" in m for m in messages[:-1]), "not tokens, then the result")
        final = messages[-1]["result"]
        ids = [t.get("tokenId", 0) for t in tokens]
        limit = options.get("max_new_tokens")
        result.check(tokens and (limit is None or len(tokens) <= limit),
                     f"{len(tokens)} tokens for max_new_tokens {limit}")
        result.check(final.get("finishReason", "").startswith("FINISH_REASON_"), "no finishReason")
        result_ids = final.get("tokenIds", [])
        if final["finishReason"] == "FINISH_REASON_STOP":
            result.check(ids[:len(result_ids)] == result_ids, "the result's tokens are not "
                                                              "those streamed")
        else:
            result.check(ids == result_ids, "the result's tokens are not those streamed")
            result.check(final.get("text", "") == "".join(t.get("text", "") for t in tokens),
                         "the result's text is not the streamed tokens' text")
        return f"{len(tokens)} tokens then the result ({final['finishReason']})"

    def check_GetTask(self, args, requests, messages, result):
        [request] = requests
        self.check_task_header(args, requests, result)
        [task] = messages
        result.check(task.get("taskId") == request["task_id"], "another task")
        result.check(task.get("state") == "TASK_STATE_READY", f"state {task.get('state')}")
        result.check(task.get("spec", {}).get("labels") == self.labels.get(request["task_id"]),
                     "not the labels it was created with")
        return f"task {task['taskId']} ready"

    def check_ListTasks(self, args, requests, messages, result):
        [request] = requests
        result.check(not args.headers, "ListTasks is not a per-task call: no x-manyshot-task")
        [page] = messages
        ids = [t["taskId"] for t in page.get("tasks", [])]
        result.check(len(ids) <= request.get("page_size", 50), "more tasks than page_size")
        if request.get("page_token"):
            result.check(not set(ids) & set(self.first_page),
                         f"the next page repeats {self.first_page}")
            result.check(set(ids) | set(self.first_page) >= set(self.labels) | {EXTRA_TASK},
                         "the two pages miss a task")
            return f"next page {ids} after {self.first_page}"
        result.check(set(ids) >= set(self.labels) | {EXTRA_TASK}, "a created task is missing")
        return f"tasks {ids}"

    def check_DeleteTask(self, args, requests, messages, result):
        [request] = requests
        self.check_task_header(args, requests, result)
        [response] = messages
        result.check(int(response.get("freedBytes", 0)) > 0, "no bytes freed")
        self.labels.pop(request["task_id"], None)
        return f"deleted {request['task_id']}"


def run(args, tmp):
    with open(args.doc) as f:
        doc = f.read()
    blocks = fenced_blocks(doc)
    documented = sum(len(GRPCURL_WORD.findall(body)) for _, body, _ in blocks)
    check(documented > 0, f"no grpcurl command in {args.doc}")

    bin_dir = os.path.join(tmp, "bin")
    os.mkdir(bin_dir)
    wrapper = os.path.join(bin_dir, "grpcurl")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\nexec /usr/bin/python3 {shlex.quote(args.grpcurl_lite)} "$@"\n')
    os.chmod(wrapper, 0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               GRPCURL_LITE_PROTO_DIR=args.proto_dir, GRPCURL_LITE_CONNECT_TIMEOUT="60")
    workdir = os.path.join(tmp, "work")
    os.mkdir(workdir)

    server = Server(args.server_binary, args.tokenizer_dir, tmp)
    try:
        test = DocTest(server.address, env, workdir, args.grpcurl_lite)
        deadline = time.monotonic() + 120
        while True:
            ready = test.grpcurl(["-plaintext", server.address, "grpc.health.v1.Health/Check"])
            if ready.status == 0 and '"SERVING"' in ready.stdout:
                break
            ready.check(time.monotonic() < deadline, "not SERVING within 120 s")
            time.sleep(0.5)
        extra = test.grpcurl(
            ["-plaintext", "-H", f"x-manyshot-task: {EXTRA_TASK}", "-d", "@", server.address,
             "manyshot.v1.ManyShot/CreateTask"],
            json.dumps({"task_id": EXTRA_TASK, "spec": {"input_template": "{text}:",
                                                        "labels": ["no", "yes"]},
                        "demonstrations": [{"text": "a", "label": "yes"}]}))
        extra.check(extra.status == 0 and '"created": true' in extra.stdout,
                    f"creating {EXTRA_TASK} failed")

        commands = []
        for index, (language, body, line) in enumerate(blocks):
            if language in ("sh", "shell", "bash"):
                following = blocks[index + 1] if index + 1 < len(blocks) else None
                block_commands = split_commands(body, line)
                for position, command in enumerate(block_commands):
                    last = position == len(block_commands) - 1
                    commands.append((command, following if last else None))
        for command, following in commands:
            test.run_command(command, following)
        print("\n".join(test.checked))
        check(test.grpcurl_runs == documented,
              f"{test.grpcurl_runs} grpcurl commands run, but {args.doc} has {documented} in "
              f"its code blocks: each must be in a ```sh (or bash, shell) block")
    except BaseException:
        print(f"server log:\n{server.log()}", file=sys.stderr)
        server.kill()
        raise
    server.stop()
    print(f"all {documented} grpcurl commands of {args.doc} ran as documented; the server "
          f"stopped with status 0")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server_binary", required=True)
    parser.add_argument("--doc", default=os.path.join(REPO, "client", "examples", "grpcurl.md"))
    parser.add_argument("--proto_dir", default=os.path.join(REPO, "proto"))
    parser.add_argument("--grpcurl_lite",
                        default=os.path.join(REPO, "tools", "grpcurl_lite", "grpcurl_lite.py"))
    parser.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    args = parser.parse_args()
    try:
        for name in ["server_binary", "doc", "proto_dir", "grpcurl_lite"]:
            setattr(args, name, os.path.abspath(getattr(args, name)))
            check(os.path.exists(getattr(args, name)), f"--{name}={getattr(args, name)}: "
                                                       f"not found")
        with tempfile.TemporaryDirectory(prefix="manyshot_grpcurl_doc_") as tmp:
            run(args, tmp)
    except Failure as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as error:
        print(f"FAIL: timed out: {error}", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
