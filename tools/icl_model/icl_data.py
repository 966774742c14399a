"""Reads the folder prepare_data.py writes (numpy only: train.py, the tests and the episode builder
share it). Every file is checked against the sha256 that index.json records, so a truncated or
stale copy on the GPU machine fails at load, not as a silently different model.
"""

import hashlib
import json
import os

import numpy as np

from file_hash import sha256_file

TRAIN, HELDOUT = 0, 1
SST2_TRAIN, SST2_DEV, SST2_TEST = 0, 1, 2


class IclData:
    def __init__(self, data_dir, verify=True):
        self.dir = data_dir
        index_path = os.path.join(data_dir, "index.json")
        with open(index_path, "rb") as f:
            raw = f.read()
        self.index_sha256 = hashlib.sha256(raw).hexdigest()  # names the whole data set
        self.index = json.loads(raw)
        if verify:
            for name, info in self.index["files"].items():
                path = os.path.join(data_dir, name)
                digest = sha256_file(path)
                if digest != info["sha256"]:
                    raise ValueError(f"{path}: sha256 {digest} differs from index.json's "
                                     f"{info['sha256']} (re-run prepare_data.py and copy again)")
        self.tokens = np.fromfile(os.path.join(data_dir, "tokens.u16"), dtype="<u2")
        self.examples = np.fromfile(os.path.join(data_dir, "examples.i32"),
                                    dtype="<i4").reshape(-1, 5)
        self.sst2_tokens = np.fromfile(os.path.join(data_dir, "sst2.u16"), dtype="<u2")
        self.sst2_examples = np.fromfile(os.path.join(data_dir, "sst2.i32"),
                                         dtype="<i4").reshape(-1, 4)
        self.bos = int(self.index["bos_id"])
        self.sep_ids = np.asarray(self.index["separator"]["ids"], dtype=np.int64)
        self.datasets = self.index["datasets"]
        self.templates = [(np.asarray(t["prefix_ids"], dtype=np.int64),
                           np.asarray(t["cue_ids"], dtype=np.int64))
                          for t in self.index["templates"]]
        self.pool_ids = np.asarray([w["id"] for w in self.index["label_pool"]], dtype=np.int64)
        self.pool_words = [w["word"] for w in self.index["label_pool"]]
        # by_class[split][dataset] = [array of example row indices of class c]
        self.by_class = {}
        for split in (TRAIN, HELDOUT):
            per = []
            for d, info in enumerate(self.datasets):
                rows = self.examples
                mask = (rows[:, 0] == d) & (rows[:, 1] == split)
                per.append([np.flatnonzero(mask & (rows[:, 2] == c))
                            for c in range(info["classes"])])
            self.by_class[split] = per

    def piece(self, row):
        """Token ids (int64) of example row `row`'s piece."""
        _, _, _, start, length = self.examples[row]
        return self.tokens[start:start + length].astype(np.int64)

    def is_free(self, d):
        return self.datasets[d]["template"] == "free"

    def sst2(self, split):
        """[(ids int64, class)] of one SST-2 split, in file order."""
        out = []
        for s, cls, start, length in self.sst2_examples:
            if s == split:
                out.append((self.sst2_tokens[start:start + length].astype(np.int64), int(cls)))
        return out

    def sst2_word_ids(self):
        return [int(i) for i in self.index["sst2_eval"]["word_ids"]]
