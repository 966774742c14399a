#!/usr/bin/python3
"""prepare_data.py on the real ../shared/datasets:

  * deterministic: two runs into two folders give byte-identical files;
  * SST-2 is held out: no sst2_* / sst5_* folder is read, and no example in the written data file
    (decoded from its token ids with vocab.json alone) is an SST-2 sentence (train, dev or test,
    both copies) or shares a 40-character run with one, after normalisation; the SST-2 sentences
    are read and normalised here, not with prepare_data's code;
  * the piece-concatenation property on a sample of the written data: a demonstration's ids built
    from pieces (prefix, text, cue, label word, separator) equal the tokenize binary's ids of the
    demonstration's whole text, for training demonstrations and SST-2 evaluation ones;
  * the label-word pool: single tokens with a leading space, distinct, holding the evaluation's
    " Negative" / " Positive".

    /usr/bin/python3 tools/icl_model/tests/prepare_data_test.py --tokenize=build/tools/tokenize \
        --tokenizer_dir=/usr/local/share/manyshot/gpt2 --datasets_dir=../shared/datasets

Exit 77 (skipped) when the datasets folder is missing.
"""

import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import dataset_test_main  # tests/, the script's own folder

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ICL = os.path.dirname(HERE)
sys.path.insert(0, ICL)
import episodes  # noqa: E402
import gpt2_tokens  # noqa: E402
import icl_data  # noqa: E402
import sst2_eval  # noqa: E402

ARGS = None
OUT = {}  # the two prepared folders, made once


def norm(text):
    # Independent of datasets.normalise: lower-case ASCII letters and digits only.
    return "".join(c for c in text.lower() if c.isascii() and c.isalnum())


def sst2_texts(datasets_dir):
    texts = []
    for name in ("stsa.binary.train", "stsa.binary.dev", "stsa.binary.test"):
        with open(os.path.join(datasets_dir, "sst2_cbu", name), encoding="utf-8",
                  errors="replace") as f:
            texts += [line.split(" ", 1)[1] for line in f if " " in line.strip()]
    folder = os.path.join(datasets_dir, "sst2_dataicl")
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["input"]
                texts.append(text.replace("Review: ", "", 1).replace("\nSentiment:", ""))
    return texts


def prepare(out):
    subprocess.run(["/usr/bin/python3", os.path.join(ICL, "prepare_data.py"),
                    f"--datasets_dir={ARGS.datasets_dir}", f"--tokenize={ARGS.tokenize}",
                    f"--tokenizer_dir={ARGS.tokenizer_dir}", f"--out={out}"],
                   check=True, stdout=subprocess.DEVNULL)


class PrepareDataTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="icl_prepare_")
        t = time.time()
        for name in ("a", "b"):
            OUT[name] = os.path.join(cls.tmp.name, name)
            prepare(OUT[name])
        print(f"two prepare_data runs: {time.time() - t:.1f} s", file=sys.stderr)
        cls.data = icl_data.IclData(OUT["a"])
        cls.decoder = gpt2_tokens.Decoder(OUT["a"])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_two_runs_write_identical_bytes(self):
        names = sorted(os.listdir(OUT["a"]))
        self.assertEqual(names, sorted(os.listdir(OUT["b"])))
        self.assertIn("tokens.u16", names)
        _, mismatch, errors = filecmp.cmpfiles(OUT["a"], OUT["b"], names, shallow=False)
        self.assertEqual((mismatch, errors), ([], []))

    def test_no_sst_folder_is_read(self):
        for d in self.data.datasets:
            self.assertFalse(d["folder"].startswith(("sst2_", "sst5_")), d["folder"])
        patterns = {e["pattern"] for e in self.data.index["excluded_folders"]}
        self.assertTrue({"sst2_*", "sst5_*"} <= patterns)
        self.assertEqual(self.data.index["unread_folders"], [])

    def test_no_example_is_or_overlaps_an_sst2_sentence(self):
        sst = [norm(t) for t in sst2_texts(ARGS.datasets_dir)]
        sst = [s for s in sst if s]
        self.assertGreater(len(sst), 9000)
        exact = set(sst)
        w = 40
        windows = {s[i:i + w] for s in sst for i in range(len(s) - w + 1)}
        n, hits = 0, []
        for row in range(len(self.data.examples)):
            text = norm(self.decoder.decode(self.data.piece(row)))
            n += 1
            if text in exact or any(text[i:i + w] in windows for i in range(len(text) - w + 1)):
                hits.append(text[:80])
        self.assertGreater(n, 30000)
        self.assertEqual(hits, [], f"{len(hits)} examples overlap SST-2")
        # And the filter did drop something real (MR is mostly SST-2 sentences).
        mr = next(d for d in self.data.datasets if d["name"] == "mr")
        self.assertGreater(mr["stats"]["dropped_sst2_exact"], 5000)

    def test_piece_concatenation_equals_joint_tokenisation(self):
        data = self.data
        sampler = episodes.EpisodeSampler(data, icl_data.TRAIN, 1024)
        rng = np.random.default_rng(5)
        cases = []
        for row in rng.choice(len(data.examples), size=150, replace=False):
            d = int(data.examples[row, 0])
            template = int(rng.integers(len(data.templates))) if data.is_free(d) else -1
            word = int(data.pool_ids[rng.integers(len(data.pool_ids))])
            ids = sampler.demonstration(d, int(row), template, word)
            cases.append(ids)
        sst_train = data.sst2(icl_data.SST2_TRAIN)
        words = data.sst2_word_ids()
        for i in rng.choice(len(sst_train), size=50, replace=False):
            ids, cls = sst_train[i]
            cases.append(sst2_eval.demonstration(ids, words[cls], data.sep_ids))
        texts = [self.decoder.decode(ids) for ids in cases]
        for t in texts:
            self.assertTrue(t.endswith("\n\n"), repr(t[-20:]))
        joint = gpt2_tokens.encode_many(ARGS.tokenize, ARGS.tokenizer_dir, texts)
        for ids, j, t in zip(cases, joint, texts):
            self.assertEqual(list(ids), j, repr(t))
        # The sample covers every template and several-field datasets too.
        self.assertGreater(len({int(data.examples[r, 0]) for r in range(len(data.examples))}), 8)

    def test_label_pool(self):
        data = self.data
        words = [" " + w for w in data.pool_words]
        ids = gpt2_tokens.encode_many(ARGS.tokenize, ARGS.tokenizer_dir, words)
        self.assertEqual([[int(i)] for i in data.pool_ids], ids)
        self.assertEqual(len(set(data.pool_ids.tolist())), len(data.pool_ids))
        self.assertGreaterEqual(len(data.pool_ids), 100)
        for w in ("Negative", "Positive", "negative", "positive", "great", "terrible"):
            self.assertIn(w, data.pool_words)
        self.assertEqual(data.sst2_word_ids(), [36183, 33733])  # " Negative", " Positive"

    def test_sst2_evaluation_inputs_are_rendered_like_the_preset(self):
        dev = self.data.sst2(icl_data.SST2_DEV)
        self.assertEqual(len(dev), 872)
        text = self.decoder.decode(dev[0][0])
        self.assertTrue(text.startswith("Sentence: ") and text.endswith("\nLabel:"), text)


if __name__ == "__main__":
    sys.exit(dataset_test_main.run(sys.modules[__name__]))
