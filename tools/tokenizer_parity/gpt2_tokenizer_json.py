#!/usr/bin/python3
"""Writes a Hugging Face tokenizer.json for GPT-2 from vocab.json + merges.txt.

The result is what transformers' GPT2TokenizerFast saves: byte-level BPE (ByteLevel
pre-tokenizer with the GPT-2 regex, no prefix space; ByteLevel decoder) with <|endoftext|> as a
special added token.

Usage: /usr/bin/python3 gpt2_tokenizer_json.py gpt2_dir out_dir [--merges-as-pairs]
"""
import json
import os
import sys


def convert(src_dir, out_dir, merges_as_pairs=False):
    with open(os.path.join(src_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    merges = []
    with open(os.path.join(src_dir, "merges.txt"), encoding="utf-8") as f:
        for i, line in enumerate(f.read().split("\n")):
            if (i == 0 and line.startswith("#version")) or not line.strip():
                continue
            a, b = line.split(" ")
            merges.append([a, b] if merges_as_pairs else f"{a} {b}")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    added = []
    if "<|endoftext|>" in vocab:
        added.append({"id": vocab["<|endoftext|>"], "content": "<|endoftext|>",
                      "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": True, "special": True})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": merges},
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    convert(sys.argv[1], sys.argv[2], "--merges-as-pairs" in sys.argv[3:])
