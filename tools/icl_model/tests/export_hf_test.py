#!/usr/bin/python3
"""export_hf.py and transport.py against the project's own loader and an independent forward:

  * random weights of train.py's architecture (GPT2LMHeadModel names, Conv1D [in, out]) are
    exported as bf16 shards with an index; the files are deterministic, every shard is under the
    limit unless it holds a single larger tensor, and reading them back gives the bf16-rounded
    weights exactly;
  * transport.py split/join gives the directory back byte for byte and refuses a missing part or
    a corrupted file;
  * manyshot-server loads the exported directory (--model_dir) and its candidate scores (sum of
    log-probabilities through `manyshot score`, STRUCTURED and CONVENTIONAL) equal those of the
    NumPy reference forward (tools/reference/reference.py + structured.py, float64) run on the
    weights train.py would hold, within TOLERANCE;
  * negative control, every run: an export whose attention output projection is transposed (the
    Conv1D layout bug this guards against) is loaded by the same server and must MISS the
    reference by far more than TOLERANCE.

    /usr/bin/python3 tools/icl_model/tests/export_hf_test.py \
        --server=build/server/manyshot-server --client=build/client/manyshot \
        --tokenize=build/tools/tokenize --tokenizer_dir=/usr/local/share/manyshot/gpt2
"""

import argparse
import filecmp
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ICL = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(ICL))
sys.path.insert(0, ICL)
sys.path.insert(0, os.path.join(REPO, "tools", "reference"))
import export_hf  # noqa: E402
import gpt2_tokens  # noqa: E402
import reference  # noqa: E402
import structured as sp  # noqa: E402
import transport  # noqa: E402

ARGS = None
# The server computes in float32, the reference in float64: sums of log-probabilities over a few
# tokens after ~100 context tokens agree to ~1e-5 here (7e-6 measured); a layout error moves them
# by whole units (10 measured for the transposed projection below).
TOLERANCE = 5e-4
CFG = dict(n_layer=2, n_embd=64, n_head=4, n_positions=256)
BOS = 50256
TEMPLATE = "Sentence: {text}\nLabel:"
DEMOS = [("a gorgeous, witty, seductive movie", "Positive"), ("dull and lifeless", "Negative"),
         ("the best film of the year", "Positive"), ("a mess from start to finish", "Negative"),
         ("warm, funny and wise", "Positive"), ("tedious beyond words", "Negative"),
         ("an exhilarating ride", "Positive")]
QUERIES = ["an utter bore", "one of the most moving films in years"]
CANDIDATES = [" Positive", " Negative", " a fine film indeed"]
GROUP_LENGTH = 40


def random_tensors(seed=7):
    """Weights with enough spread that a wrong layout changes every score."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in export_hf.gpt2_tensor_shapes(CFG["n_layer"], CFG["n_embd"],
                                                    CFG["n_positions"]):
        if name.endswith("wte.weight"):
            a = rng.normal(0, 0.5, shape)
        elif name.endswith("wpe.weight"):
            a = rng.normal(0, 0.3, shape)
        elif "ln_" in name and name.endswith(".weight"):
            a = 1 + rng.normal(0, 0.1, shape)
        elif name.endswith(".bias"):
            a = rng.normal(0, 0.05, shape)
        else:
            a = rng.normal(0, 0.2, shape)
        out[name] = a.astype(np.float32)
    return out


SHARD_BYTES = 64 * 1024  # small, so the layers spread over several shards


def export(out_dir, tensors, max_shard_bytes=SHARD_BYTES):
    return export_hf.export_hf_dir(out_dir, tensors, CFG["n_layer"], CFG["n_embd"],
                                   CFG["n_head"], CFG["n_positions"], ARGS.tokenizer_dir,
                                   dtype="bf16", max_shard_bytes=max_shard_bytes)


class Server:
    """manyshot-server on a free loopback port with its own data directory."""

    def __init__(self, model_dir, work):
        os.makedirs(work, exist_ok=True)
        self.port_file = os.path.join(work, "ports")
        self.log_path = os.path.join(work, "server.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [ARGS.server, f"--model_dir={model_dir}", f"--data_dir={work}/data",
                 "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
                 f"--port_file={self.port_file}", "--threads=2"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        self.port = None
        while self.port is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {self.log()}")
            if os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    for line in f:
                        if line.startswith("grpc="):
                            self.port = int(line.split("=")[1])
            time.sleep(0.1)

    def log(self):
        with open(self.log_path) as f:
            return f.read()[-3000:]

    def cli(self, *args):
        out = subprocess.run([ARGS.client, f"--server=127.0.0.1:{self.port}", *args],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"manyshot {' '.join(args)}: {out.stderr}\n{self.log()}")
        return out.stdout

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def server_scores(model_dir, work):
    """{mode: [[sum_logprob per candidate] per query]} from manyshot score."""
    server = Server(model_dir, work)
    try:
        demos = os.path.join(work, "demos.jsonl")
        with open(demos, "w") as f:
            for text, label in DEMOS:
                f.write(json.dumps({"text": text, "label": label}) + "\n")
        items = os.path.join(work, "items.jsonl")
        with open(items, "w") as f:
            for q in QUERIES:
                f.write(json.dumps({"text": q, "candidates": CANDIDATES}) + "\n")
        server.cli("create", "t", f"--file={demos}", f"--template={TEMPLATE}",
                   "--labels=Negative,Positive", f"--group_length={GROUP_LENGTH}",
                   "--alignment=attention_mask", "--mode=structured")
        out = {}
        for mode in ("structured", "conventional"):
            lines = server.cli("--json", "score", "t", f"--file={items}", f"--mode={mode}")
            rows = [json.loads(line) for line in lines.splitlines() if line.strip()]
            out[mode] = [[c["sum_logprob"] for c in r["candidates"]] for r in rows]
        return out
    finally:
        server.stop()


def reference_scores(tensors):
    """The same scores from the NumPy reference on `tensors` as bf16 storage keeps them."""
    config = export_hf.hf_config(CFG["n_layer"], CFG["n_embd"], CFG["n_head"],
                                 CFG["n_positions"])
    model = reference.Gpt2Model(config, {n: export_hf.bf16_round(a).astype(np.float64)
                                         for n, a in tensors.items()})
    demo_texts = [TEMPLATE.replace("{text}", t) + " " + lab + "\n\n" for t, lab in DEMOS]
    query_texts = [TEMPLATE.replace("{text}", q) for q in QUERIES]
    cache = {}
    wanted = demo_texts + query_texts + [q + c for q in query_texts for c in CANDIDATES] + \
        CANDIDATES
    for t, ids in zip(wanted, gpt2_tokens.encode_many(ARGS.tokenize, ARGS.tokenizer_dir,
                                                      wanted)):
        cache[t] = ids
    encode = cache.__getitem__
    demos = [encode(t) for t in demo_texts]
    packing = sp.build_groups(demos, GROUP_LENGTH, "ATTENTION_MASK", 0, "REJECT", 220)
    assert len(packing["groups"]) >= 2, "the test wants several structured groups"
    layouts = {
        "structured": sp.Layout("STRUCTURED", BOS, GROUP_LENGTH, groups=packing["groups"]),
        "conventional": sp.Layout("CONVENTIONAL", BOS, GROUP_LENGTH,
                                  window=sp.conventional_window(demos, GROUP_LENGTH, 0, "REJECT")),
    }
    out = {}
    for mode, layout in layouts.items():
        scorer = sp.Scorer(model, layout)
        out[mode] = []
        for qt in query_texts:
            cands = [sp.continuation(encode, qt, c) for c in CANDIDATES]
            out[mode].append(scorer.score_candidates(encode(qt), cands)[0])
    return out


def max_difference(a, b):
    return max(abs(x - y) for mode in a for ra, rb in zip(a[mode], b[mode])
               for x, y in zip(ra, rb))


class ExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="icl_export_")
        cls.tensors = random_tensors()
        cls.model_dir = os.path.join(cls.tmp.name, "model")
        cls.written = export(cls.model_dir, cls.tensors)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_directory_layout(self):
        names = sorted(os.listdir(self.model_dir))
        shards = [n for n in names if n.endswith(".safetensors")]
        self.assertGreaterEqual(len(shards), 3)
        self.assertEqual(sorted(self.written), names)
        for n in ("config.json", "model.safetensors.index.json", "vocab.json", "merges.txt"):
            self.assertIn(n, names)
        with open(os.path.join(self.model_dir, "model.safetensors.index.json")) as f:
            index = json.load(f)
        self.assertEqual(set(index["weight_map"]), set(self.tensors))
        self.assertEqual(set(index["weight_map"].values()), set(shards))
        for shard in shards:
            held = [n for n, s in index["weight_map"].items() if s == shard]
            if len(held) > 1:
                self.assertLessEqual(os.path.getsize(os.path.join(self.model_dir, shard)),
                                     SHARD_BYTES + 4096)  # + the header
        with open(os.path.join(self.model_dir, "config.json")) as f:
            config = json.load(f)
        for key, value in dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4,
                               n_positions=256, vocab_size=50257, activation_function="gelu_new",
                               tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=BOS,
                               torch_dtype="bfloat16").items():
            self.assertEqual(config[key], value, key)
        self.assertNotIn("lm_head.weight", index["weight_map"])  # tied, as transformers saves it

    def test_reads_back_as_the_bf16_rounded_weights(self):
        back = reference.read_safetensors_dir(self.model_dir)
        self.assertEqual(set(back), set(self.tensors))
        for name, a in self.tensors.items():
            np.testing.assert_array_equal(back[name], export_hf.bf16_round(a).astype(np.float64))
            self.assertLessEqual(np.max(np.abs(back[name] - a)), np.max(np.abs(a)) * 2**-8)

    def test_bf16_rounding_is_to_nearest_even(self):
        x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 0.0, np.inf], dtype=np.float32)
        self.assertEqual(export_hf.bf16_round(x).tolist(), [1.0, 1.0, 1.0 + 2**-6, -2.5, 0.0,
                                                            np.inf])

    def test_same_weights_same_bytes(self):
        again = os.path.join(self.tmp.name, "again")
        export(again, self.tensors)
        names = sorted(os.listdir(self.model_dir))
        _, mismatch, errors = filecmp.cmpfiles(self.model_dir, again, names, shallow=False)
        self.assertEqual((mismatch, errors), ([], []))

    def test_wrong_names_or_shapes_are_refused(self):
        bad = dict(self.tensors)
        bad["transformer.h.0.attn.c_proj.weight"] = bad["transformer.h.0.attn.c_attn.weight"]
        with self.assertRaises(ValueError):
            export(os.path.join(self.tmp.name, "bad"), bad)
        bad = dict(self.tensors)
        bad["lm_head.weight"] = bad["transformer.wte.weight"]
        with self.assertRaises(ValueError):
            export(os.path.join(self.tmp.name, "bad2"), bad)

    def test_transport_split_and_join(self):
        parts = os.path.join(self.tmp.name, "parts")
        written = transport.split_dir(self.model_dir, parts, part_bytes=2**20)
        self.assertTrue(any(".part" in n for n in written))
        for n in written:
            self.assertLessEqual(os.path.getsize(os.path.join(parts, n)), 2**20)
        manifest = os.path.join(self.tmp.name, "manifest.json")
        files = {}
        for n in os.listdir(self.model_dir):
            with open(os.path.join(self.model_dir, n), "rb") as f:
                files[n] = {"sha256": hashlib.sha256(f.read()).hexdigest()}
        with open(manifest, "w") as f:
            json.dump({"files": files}, f)
        transport.join_dir(parts, manifest)
        names = sorted(os.listdir(self.model_dir))
        self.assertEqual(sorted(os.listdir(parts)), names)
        _, mismatch, errors = filecmp.cmpfiles(self.model_dir, parts, names, shallow=False)
        self.assertEqual((mismatch, errors), ([], []))
        # A missing part, and a file that differs from the manifest, are refused.
        broken = os.path.join(self.tmp.name, "broken_parts")
        written = transport.split_dir(self.model_dir, broken, part_bytes=2**20)
        os.remove(os.path.join(broken, next(n for n in written if ".part2of" in n)))
        with self.assertRaises(ValueError):
            transport.join_dir(broken)
        corrupt = os.path.join(self.tmp.name, "corrupt")
        transport.split_dir(self.model_dir, corrupt, part_bytes=2**20)
        with open(os.path.join(corrupt, "config.json"), "a") as f:
            f.write(" ")
        with self.assertRaises(ValueError):
            transport.join_dir(corrupt, manifest)

    def test_server_scores_equal_the_reference_and_a_transposed_export_does_not(self):
        expected = reference_scores(self.tensors)
        got = server_scores(self.model_dir, os.path.join(self.tmp.name, "srv"))
        diff = max_difference(got, expected)
        print(f"exported model: server vs reference max |diff| {diff:.2e} "
              f"(tolerance {TOLERANCE})", file=sys.stderr)
        self.assertLess(diff, TOLERANCE, f"server {got} vs reference {expected}")
        # Negative control: the attention output projections written transposed.
        wrong = dict(self.tensors)
        for i in range(CFG["n_layer"]):
            name = f"transformer.h.{i}.attn.c_proj.weight"
            wrong[name] = np.ascontiguousarray(wrong[name].T)
        wrong_dir = os.path.join(self.tmp.name, "transposed")
        export(wrong_dir, wrong)
        got_wrong = server_scores(wrong_dir, os.path.join(self.tmp.name, "srv_wrong"))
        wrong_diff = max_difference(got_wrong, expected)
        print(f"transposed c_proj: server vs reference max |diff| {wrong_diff:.2e}",
              file=sys.stderr)
        self.assertGreater(wrong_diff, 100 * TOLERANCE)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--tokenize", required=True)
    ap.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    ARGS, rest = ap.parse_known_args()
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
