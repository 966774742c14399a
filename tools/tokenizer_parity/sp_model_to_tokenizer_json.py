#!/usr/bin/python3
"""Writes a Hugging Face tokenizer.json for a SentencePiece BPE model (tokenizer.model).

Does what transformers' LlamaConverter does (no transformers needed): the vocabulary is the
model's pieces in id order; merges are derived from the vocabulary as SentencePieceExtractor
does (every split of a piece into two pieces that are both in the vocabulary, ordered by the
piece's score, best first); BPE with byte_fallback and fuse_unk; the normalizer prepends "▁"
and replaces " " by "▁"; the decoder undoes that. <unk>, <s>, </s> become special added tokens.
Also writes tokenizer_config.json naming bos/eos.

--gemma writes Gemma's layout instead (transformers' GemmaConverter, as in google/gemma-2-2b's
tokenizer.json): the normalizer is a bare Replace(" " -> "▁") (the model adds no dummy prefix),
the user-defined pieces (<start_of_turn>, <end_of_turn>, ...) are added tokens too, and the
post-processor is a TemplateProcessing that puts <bos> first.

Usage: /usr/bin/python3 sp_model_to_tokenizer_json.py tokenizer.model out_dir
           [--merges-as-strings] [--gemma]
"""
import json
import os
import sys

from sentencepiece import sentencepiece_model_pb2 as model_pb2

# SentencePiece piece types (sentencepiece_model.proto).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def extract_merges(vocab, vocab_scores):
    """transformers' SentencePieceExtractor.extract(vocab_scores): merges best score first."""
    merges = []
    for merge, piece_score in vocab_scores.items():
        local = []
        for index in range(1, len(merge)):
            piece_l, piece_r = merge[:index], merge[index:]
            if piece_l in vocab and piece_r in vocab:
                local.append((piece_l, piece_r, piece_score))
        local = sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges = sorted(merges, key=lambda val: val[2], reverse=True)
    return [(val[0], val[1]) for val in merges]


def bos_template(bos_piece, bos_id):
    """TemplateProcessing with bos first (GemmaConverter's post-processor)."""
    def special(type_id):
        return {"SpecialToken": {"id": bos_piece, "type_id": type_id}}

    def sequence(name, type_id):
        return {"Sequence": {"id": name, "type_id": type_id}}

    return {
        "type": "TemplateProcessing",
        "single": [special(0), sequence("A", 0)],
        "pair": [special(0), sequence("A", 0), special(1), sequence("B", 1)],
        "special_tokens": {bos_piece: {"id": bos_piece, "ids": [bos_id], "tokens": [bos_piece]}},
    }


def convert(model_path, out_dir, merges_as_strings=False, gemma=False):
    proto = model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    if proto.trainer_spec.model_type != model_pb2.TrainerSpec.BPE:
        raise SystemExit("only BPE SentencePiece models are supported (Llama, Mistral, ...)")
    pieces = [(p.piece, p.score, p.type) for p in proto.pieces]
    vocab = {piece: i for i, (piece, _, _) in enumerate(pieces)}
    # LlamaConverter gives the three special pieces score 0; they are control/unknown anyway.
    vocab_scores = {}
    for i, (piece, score, ptype) in enumerate(pieces):
        vocab_scores[piece] = 0.0 if ptype in (UNKNOWN, CONTROL) else score
    merges = extract_merges(vocab, vocab_scores)
    unk_piece = proto.trainer_spec.unk_piece or "<unk>"
    added = []
    added_types = (UNKNOWN, CONTROL, USER_DEFINED) if gemma else (UNKNOWN, CONTROL)
    for i, (piece, _, ptype) in enumerate(pieces):
        if ptype in added_types:
            added.append({"id": i, "content": piece, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": ptype != USER_DEFINED})
    normalizers = []
    if proto.normalizer_spec.add_dummy_prefix:
        normalizers.append({"type": "Prepend", "prepend": "▁"})
    normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
    decoders = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if proto.normalizer_spec.add_dummy_prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    normalizer = {"type": "Sequence", "normalizers": normalizers}
    post_processor = None
    if gemma:
        if proto.normalizer_spec.add_dummy_prefix:
            raise SystemExit("--gemma: Gemma's models add no dummy prefix")
        normalizer = normalizers[0]
        bos = proto.trainer_spec.bos_id
        post_processor = bos_template(pieces[bos][0], bos)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": None,
        "post_processor": post_processor,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk_piece,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges] if merges_as_strings
                      else [[a, b] for a, b in merges],
        },
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config = {"tokenizer_class": "GemmaTokenizer" if gemma else "LlamaTokenizerFast",
              "legacy": True}
    for key, pid in (("bos_token", proto.trainer_spec.bos_id),
                     ("eos_token", proto.trainer_spec.eos_id),
                     ("unk_token", proto.trainer_spec.unk_id)):
        config[key] = pieces[pid][0] if 0 <= pid < len(pieces) else None
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    convert(sys.argv[1], sys.argv[2], "--merges-as-strings" in sys.argv[3:],
            "--gemma" in sys.argv[3:])
