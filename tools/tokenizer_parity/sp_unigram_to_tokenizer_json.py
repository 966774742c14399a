#!/usr/bin/python3
"""Writes a Hugging Face tokenizer.json for a SentencePiece Unigram model (spiece.model).

Does what transformers' T5Converter (SpmConverter) writes for T5 (no transformers needed): a
Unigram model with the pieces and scores in id order, unk_id and byte_fallback; the model's
precompiled normalization rules as a "Precompiled" normalizer (base64); WhitespaceSplit then
Metaspace("▁", add_prefix_space) as pre-tokenizer (Metaspace alone when the model keeps extra
whitespace); a Metaspace decoder. Control and unknown pieces become special added tokens,
user-defined pieces non-special ones. Also writes tokenizer_config.json naming eos (and bos when
the model has one).

With --current-layout, writes what transformers' SpmConverter writes today instead (the T5 files
on the Hub predate it): Precompiled, Strip(right) and Replace(" {2,}" -> "▁") as normalizer,
Metaspace(prepend_scheme "always") alone as pre-tokenizer.

Usage: /usr/bin/python3 sp_unigram_to_tokenizer_json.py spiece.model out_dir [--current-layout]
"""
import base64
import json
import os
import sys

from sentencepiece import sentencepiece_model_pb2 as model_pb2

# SentencePiece piece types (sentencepiece_model.proto).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"


def convert(model_path, out_dir, current_layout=False):
    proto = model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    if proto.trainer_spec.model_type != model_pb2.TrainerSpec.UNIGRAM:
        raise SystemExit("only Unigram SentencePiece models are supported (T5, ...)")
    norm = proto.normalizer_spec
    added = []
    for i, p in enumerate(proto.pieces):
        if p.type in (UNKNOWN, CONTROL, USER_DEFINED):
            added.append({"id": i, "content": p.piece, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": p.type != USER_DEFINED})
    charsmap = norm.precompiled_charsmap
    metaspace = {"type": "Metaspace", "replacement": SPACE,
                 "add_prefix_space": norm.add_dummy_prefix}
    if norm.remove_extra_whitespaces:
        pre_tokenizer = {"type": "Sequence",
                         "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]}
    else:
        pre_tokenizer = metaspace
    normalizer = {"type": "Precompiled",
                  "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")
                  if charsmap else None}
    if current_layout:
        if not norm.remove_extra_whitespaces:
            raise SystemExit("--current-layout needs a model that removes extra whitespace")
        normalizer = {"type": "Sequence", "normalizers": [
            normalizer,
            {"type": "Strip", "left": False, "right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": SPACE}]}
        metaspace = {"type": "Metaspace", "replacement": SPACE,
                     "prepend_scheme": "always" if norm.add_dummy_prefix else "never",
                     "split": True}
        pre_tokenizer = metaspace
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": dict(metaspace),
        "model": {
            "type": "Unigram",
            "unk_id": proto.trainer_spec.unk_id,
            "vocab": [[p.piece, p.score] for p in proto.pieces],
            "byte_fallback": proto.trainer_spec.byte_fallback,
        },
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    pieces = [p.piece for p in proto.pieces]
    config = {"tokenizer_class": "T5TokenizerFast"}
    for key, pid in (("bos_token", proto.trainer_spec.bos_id),
                     ("eos_token", proto.trainer_spec.eos_id),
                     ("unk_token", proto.trainer_spec.unk_id),
                     ("pad_token", proto.trainer_spec.pad_id)):
        config[key] = pieces[pid] if 0 <= pid < len(pieces) else None
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["--current-layout"]):
        raise SystemExit(__doc__)
    convert(sys.argv[1], sys.argv[2], sys.argv[3:] == ["--current-layout"])
