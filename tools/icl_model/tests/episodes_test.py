#!/usr/bin/python3
"""The torch-free parts of training, on a capped prepare_data.py output:

  * episodes.py: per episode, distinct classes and distinct label words, all from the pool, each
    demonstration's word the one of its example's class; whole demonstrations packed within the
    context (bos first, bos padding after); the loss mask marks exactly the label tokens (each
    right after a cue, right before the separator); batch index arrays address those targets;
    the same seed gives the same batch;
  * sst2_eval.py: conventional prompts are bos + whole demonstrations within the group length - 1
    + the query, with the preset's label words (or the swapped ones);
  * train.py: parses (--help), its learning-rate warm-up does not depend on the step count (what
    --steps=auto relies on), and --dry_run (no torch) plans 19.4 M parameters.

    /usr/bin/python3 tools/icl_model/tests/episodes_test.py --tokenize=build/tools/tokenize \
        --tokenizer_dir=/usr/local/share/manyshot/gpt2 --datasets_dir=../shared/datasets
"""

import json
import os
import subprocess
import sys
import tempfile
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
import train  # noqa: E402  (importable without torch: torch is imported inside main())

ARGS = None


class EpisodesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="icl_episodes_")
        cls.dir = os.path.join(cls.tmp.name, "data")
        subprocess.run(["/usr/bin/python3", os.path.join(ICL, "prepare_data.py"),
                        f"--datasets_dir={ARGS.datasets_dir}", f"--tokenize={ARGS.tokenize}",
                        f"--tokenizer_dir={ARGS.tokenizer_dir}", f"--out={cls.dir}",
                        "--max_per_split=200", "--check_sample=50"],
                       check=True, stdout=subprocess.DEVNULL)
        cls.data = icl_data.IclData(cls.dir)
        cls.decoder = gpt2_tokens.Decoder(cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_episode(self, e, ctx_len):
        data = self.data
        pool = set(data.pool_ids.tolist())
        sep = data.sep_ids.tolist()
        # Classes and words: distinct, 2..K, words from the pool.
        k = data.datasets[e.dataset]["classes"]
        self.assertTrue(2 <= len(e.classes) <= k)
        self.assertEqual(len(set(e.classes.tolist())), len(e.classes))
        self.assertEqual(len(set(e.label_ids.tolist())), len(e.label_ids))
        self.assertTrue(set(e.label_ids.tolist()) <= pool)
        # Packing: bos first, whole demonstrations, bos padding, within ctx_len + 1.
        self.assertEqual(len(e.tokens), ctx_len + 1)
        self.assertLessEqual(e.length, ctx_len + 1)
        self.assertEqual(e.tokens[0], data.bos)
        self.assertTrue(np.all(e.tokens[e.length:] == data.bos))
        self.assertEqual(e.tokens[e.length - len(sep):e.length].tolist(), sep)
        self.assertGreaterEqual(len(e.label_pos), 1)
        # Each demonstration: its example's class is the column's class, its word the column's.
        rebuilt = [data.bos]
        for pos, col, row in zip(e.label_pos, e.label_col, e.rows):
            self.assertEqual(int(data.examples[row, 0]), e.dataset)
            self.assertEqual(int(data.examples[row, 1]), icl_data.TRAIN)
            self.assertEqual(int(data.examples[row, 2]), int(e.classes[col]))
            self.assertEqual(int(e.tokens[pos]), int(e.label_ids[col]))
            self.assertEqual(e.tokens[pos + 1:pos + 1 + len(sep)].tolist(), sep)
            if e.template >= 0:
                cue = data.templates[e.template][1].tolist()
                self.assertEqual(e.tokens[pos - len(cue):pos].tolist(), cue)
            demo = episodes.EpisodeSampler.demonstration(
                self.sampler, e.dataset, int(row), e.template, int(e.label_ids[col]))
            rebuilt += demo.tolist()
        self.assertEqual(rebuilt, e.tokens[:e.length].tolist())
        # The loss mask marks exactly the label targets.
        mask = e.loss_mask()
        self.assertEqual(len(mask), ctx_len)
        self.assertEqual(np.flatnonzero(mask).tolist(), (e.label_pos - 1).tolist())
        targets = e.tokens[1:]
        self.assertTrue(set(targets[mask].tolist()) <= set(e.label_ids.tolist()))

    def test_episodes(self):
        for ctx_len in (1024, 160):
            self.sampler = episodes.EpisodeSampler(self.data, icl_data.TRAIN, ctx_len)
            rng = np.random.default_rng(11)
            seen_words, seen_datasets = set(), set()
            for _ in range(150):
                e = self.sampler.episode(rng)
                self.check_episode(e, ctx_len)
                seen_words.add(tuple(e.label_ids.tolist()))
                seen_datasets.add(e.dataset)
            self.assertGreater(len(seen_words), 140, "label words must change between episodes")
            self.assertGreaterEqual(len(seen_datasets), 8)

    def test_a_packed_episode_reads_as_demonstrations(self):
        sampler = episodes.EpisodeSampler(self.data, icl_data.TRAIN, 1024, weights={"trec": 1})
        e = sampler.episode(np.random.default_rng(3))
        text = self.decoder.decode(e.tokens[1:e.length])
        demos = text.split("\n\n")
        self.assertEqual(demos[-1], "")
        self.assertEqual(len(demos) - 1, len(e.label_pos))
        words = {self.decoder.decode([i]) for i in e.label_ids}
        for demo in demos[:-1]:
            head, word = demo.rsplit(":", 1)
            self.assertIn(word, words)
            self.assertIn("\n", head)

    def test_batch_arrays(self):
        sampler = episodes.EpisodeSampler(self.data, icl_data.TRAIN, 512)
        b = sampler.batch(np.random.default_rng(9), 6, lm_positions=20)
        again = sampler.batch(np.random.default_rng(9), 6, lm_positions=20)
        for key in b:
            np.testing.assert_array_equal(b[key], again[key])
        other = sampler.batch(np.random.default_rng(10), 6, lm_positions=20)
        self.assertFalse(np.array_equal(b["inputs"], other["inputs"]))
        self.assertEqual(b["inputs"].shape, (6, 512))
        flat_targets = b["targets"].reshape(-1)
        np.testing.assert_array_equal(flat_targets[b["label_index"]], b["label_target"])
        np.testing.assert_array_equal(flat_targets[b["lm_index"]], b["lm_target"])
        self.assertFalse(set(b["lm_index"].tolist()) & set(b["label_index"].tolist()))
        gold = b["label_cands"][np.arange(len(b["label_gold"])), b["label_gold"]]
        np.testing.assert_array_equal(gold, b["label_target"])
        self.assertLessEqual(len(b["lm_index"]), 6 * 20)

    def test_heldout_episodes_use_heldout_examples(self):
        sampler, eps = episodes.heldout_episodes(self.data, 512, 10, seed=1)
        for e in eps:
            self.assertTrue(np.all(self.data.examples[e.rows, 1] == icl_data.HELDOUT))

    def test_sst2_conventional_prompts(self):
        data = self.data
        words = data.sst2_word_ids()
        prompts, gold, used = sst2_eval.conventional_prompts(data, 64, 1, words, test_limit=20)
        self.assertEqual(len(prompts), 20)
        self.assertTrue(0 < used < 64)  # 64 SST-2 demonstrations do not fit 863 tokens
        dev = {tuple(ids.tolist()) for ids, _ in data.sst2(icl_data.SST2_DEV)}
        for p in prompts:
            self.assertEqual(int(p[0]), data.bos)
            self.assertLessEqual(len(p), 1024)
        # The window holds `used` whole demonstrations.
        text = self.decoder.decode(prompts[0][1:])
        self.assertEqual(text.count("\n\n"), used)
        # Each prompt's tail is a dev input; its head is the same window for all prompts.
        head = None
        for p in prompts:
            for cut in range(len(p)):
                if tuple(p[cut:].tolist()) in dev:
                    break
            else:
                self.fail("no dev input at the end of a prompt")
            self.assertLessEqual(cut - 1, 863)  # group length 864 - 1, bos not counted
            head = p[:cut] if head is None else head
            np.testing.assert_array_equal(p[:cut], head)
        # Words: the preset's, or swapped.
        t = self.decoder.decode(head)
        self.assertTrue(" Negative\n\n" in t or " Positive\n\n" in t)
        flipped, _, _ = sst2_eval.conventional_prompts(data, 8, 1, words[::-1], test_limit=1)
        same, _, _ = sst2_eval.conventional_prompts(data, 8, 1, words, test_limit=1)
        a, b = self.decoder.decode(same[0]), self.decoder.decode(flipped[0])
        self.assertEqual(a.count(" Positive\n"), b.count(" Negative\n"))
        zero, _, used0 = sst2_eval.conventional_prompts(data, 0, 1, words, test_limit=3)
        self.assertEqual(used0, 0)
        self.assertTrue(self.decoder.decode(zero[0][1:]).startswith("Sentence: "))

    def test_sst2_evaluate_reports_mean_and_std_over_samples(self):
        # A stand-in model that always prefers the second word: its accuracy is the share of
        # class 1 among the test inputs, in every sample and mapping.
        data = self.data

        def always_second(prompts, ids):
            self.assertEqual(len(ids), 2)
            return np.tile([0.0, 1.0], (len(prompts), 1))
        _, gold, _ = sst2_eval.conventional_prompts(data, 0, 1, data.sst2_word_ids(),
                                                    test_limit=50)
        for flipped in (False, True):
            r = sst2_eval.evaluate(data, always_second, [0, 4], 3, flipped=flipped,
                                   test_limit=50)
            self.assertEqual(r["by_shots"]["0"]["per_sample"], [float(np.mean(gold == 1))])
            self.assertEqual(r["by_shots"]["4"]["per_sample"], [float(np.mean(gold == 1))] * 3)
            self.assertEqual(r["by_shots"]["4"]["std"], 0.0)
            self.assertEqual(r["majority_rate"], max(np.mean(gold), 1 - np.mean(gold)))
            self.assertEqual(len(r["by_shots"]["4"]["used"]), 3)
        self.assertTrue(sst2_eval.format_table("t", r).startswith("t (majority class"))

    def test_train_dry_run_plans_the_model(self):
        out = subprocess.run(["/usr/bin/python3", os.path.join(ICL, "train.py"),
                              f"--data_dir={self.dir}", "--out_dir=/nonexistent", "--dry_run"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        plan = json.loads(out.stdout)
        self.assertEqual(plan["parameters"], 19446528)
        self.assertLessEqual(plan["parameters"], 30_000_000)
        # bf16 shards: the token embedding alone, then everything else under 15 MiB.
        self.assertEqual(plan["shard_bytes"], [50257 * 256 * 2, 13161472])


class TrainScriptTest(unittest.TestCase):
    def test_help_parses(self):
        out = subprocess.run(["/usr/bin/python3", os.path.join(ICL, "train.py"), "--help"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("--max_minutes", out.stdout)

    def test_warmup_learning_rates_do_not_depend_on_the_step_count(self):
        args = train.parse_args(["--data_dir=x", "--out_dir=y"])
        for step in range(args.warmup):
            self.assertEqual(train.lr_at(step, 1000, args), train.lr_at(step, 99999, args))
        self.assertAlmostEqual(train.lr_at(999, 1000, args), args.lr * args.min_lr_ratio, 4)
        self.assertGreater(train.lr_at(300, 1000, args), train.lr_at(600, 1000, args))


if __name__ == "__main__":
    sys.exit(dataset_test_main.run(sys.modules[__name__]))
