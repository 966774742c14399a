#!/usr/bin/python3
"""Builds the meta-ICL training data for the small ICL model from
../shared/datasets: token ids of every example, the template and label-word pieces an episode is
assembled from, and SST-2 for the final evaluation only. Runs here, before the GPU session.

    /usr/bin/python3 tools/icl_model/prepare_data.py            # -> tools/icl_model/work/data

Reads the training splits named in datasets.py (never SST-2 or SST-5; see there), drops every
example that overlaps an SST-2 sentence, tokenises with the project's own GPT-2 tokenizer
(build/tools/tokenize) and writes, deterministically (same inputs, same bytes):

  tokens.u16     uint16 token ids of every example's piece, concatenated
  examples.i32   int32 rows [dataset, split (0 train, 1 held out), class, start, length]
  sst2.u16       uint16 token ids of SST-2 inputs rendered as sst2_cbu does ("Sentence: X\nLabel:")
  sst2.i32       int32 rows [split (0 train, 1 dev = the preset's test split, 2 test), class,
                 start, length]; for train.py's final evaluation, never for training
  index.json     datasets, templates, label-word pool, counts, source and output file hashes
  vocab.json, merges.txt   the GPT-2 tokenizer (copied: train.py exports them with the model)

How pieces are cut. The server tokenises each demonstration on its own, Encode(input + answer +
separator), and concatenates the ids (engine/prompting/icl_task.cc); it never tokenises the whole
prompt at once, and the two differ: joint tokenisation turns "\n\n" followed by the next
demonstration into 198 198 where the server has 628. So an episode is built the server's way, one
demonstration at a time, and within a demonstration the ids are concatenated from pieces

    Encode(PREFIX) + Encode(" " + TEXT) + Encode(CUE) + Encode(" " + WORD) + Encode("\n\n")

(a several-field dataset has one rendered-input piece instead of the first three). That equals
Encode(PREFIX + " " + TEXT + CUE + " " + WORD + "\n\n") because every cut sits where GPT-2's
pre-tokenizer starts a new pre-token whatever follows: PREFIX and CUE end in ':' before a space,
TEXT is stripped (ends in a non-space before "\n"), WORD is letters before "\n\n". This script
checks the equality on a sample with the tokenize binary and fails if it does not hold.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import datasets as ds  # noqa: E402
from file_hash import sha256_file  # noqa: E402
import gpt2_tokens  # noqa: E402

FORMAT_VERSION = 1
BOS = 50256  # GPT-2's <|endoftext|>: the server's bos, also the padding of short episodes
SEPARATOR = "\n\n"
EVAL_WORDS = ["Negative", "Positive"]  # sst2_cbu's label words (class 0, class 1)


def read_word_list(path):
    words = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                words.append(line)
    return words


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets_dir", default=os.path.join(os.path.dirname(REPO), "shared",
                                                           "datasets"))
    ap.add_argument("--tokenize", default=os.path.join(REPO, "build", "tools", "tokenize"),
                    help="the project's tokenize binary")
    ap.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    ap.add_argument("--out", default=os.path.join(HERE, "work", "data"))
    ap.add_argument("--max_per_split", type=int, default=0,
                    help="keep at most this many examples per dataset and split (0: all); a "
                         "seeded subset, in file order")
    ap.add_argument("--max_input_tokens", type=int, default=256,
                    help="drop examples whose input is longer (so several demonstrations fit an "
                         "episode)")
    ap.add_argument("--check_sample", type=int, default=400,
                    help="demonstrations whose piece concatenation is checked against joint "
                         "tokenisation")
    ap.add_argument("--seed", type=int, default=1, help="seed of the capped subset and the check")
    return ap.parse_args(argv)


class Tokens:
    """Collects strings to tokenise, then tokenises them all in one process."""

    def __init__(self, args):
        self.args = args
        self.texts = {}

    def want(self, text):
        self.texts.setdefault(text, None)
        return text

    def run(self):
        todo = [t for t, ids in self.texts.items() if ids is None]
        for t, ids in zip(todo, gpt2_tokens.encode_many(self.args.tokenize,
                                                        self.args.tokenizer_dir, todo)):
            self.texts[t] = ids

    def __getitem__(self, text):
        return self.texts[text]


def check_folders(datasets_dir):
    """Every folder is read or excluded with a reason; others are reported, not read."""
    used = {s.folder for s in ds.SPECS}
    unread = []
    for name in sorted(os.listdir(datasets_dir)):
        if not os.path.isdir(os.path.join(datasets_dir, name)):
            continue
        if name in used:
            continue
        if ds.excluded_reason(name) is None:
            unread.append(name)
            print(f"prepare_data: folder {name} is neither read nor excluded: not read",
                  file=sys.stderr)
    for spec in ds.SPECS:
        reason = ds.excluded_reason(spec.folder)
        assert reason is None, f"{spec.folder} is both read and excluded ({reason})"
    return unread


def collect_examples(args, sst2):
    """[(spec_index, split, class, piece_text)] after filtering and capping, plus statistics."""
    out = []
    stats = []
    for d, spec in enumerate(ds.SPECS):
        splits, unknown = ds.read_dataset(spec, args.datasets_dir)
        st = {"name": spec.name, "unknown_label": unknown, "dropped_sst2_exact": 0,
              "dropped_sst2_window": 0, "dropped_empty": 0, "read": {}, "kept": {}}
        for s, split in enumerate(("train", "heldout")):
            rows = splits[split]
            st["read"][split] = len(rows)
            kept = []
            for cls, record in rows:
                why = sst2.reason(ds.record_text(spec, record))
                if why is not None:
                    st["dropped_sst2_" + why] += 1
                    continue
                if spec.fixed_template:
                    piece = ds.render_fixed(spec, record)
                else:
                    text = record.strip()
                    if not text:
                        st["dropped_empty"] += 1
                        continue
                    piece = " " + text
                kept.append((cls, piece))
            if args.max_per_split and len(kept) > args.max_per_split:
                rng = np.random.default_rng([args.seed, d, s])
                chosen = np.sort(rng.permutation(len(kept))[:args.max_per_split])
                kept = [kept[i] for i in chosen]
            out.extend((d, s, cls, piece) for cls, piece in kept)
        stats.append(st)
    return out, stats


def sst2_eval_examples(datasets_dir):
    """[(split, class, rendered input)] of sst2_cbu as the preset renders them."""
    out = []
    prefix, cue = ds.SST2_TEMPLATE
    for s, name in enumerate(["stsa.binary.train", "stsa.binary.dev", "stsa.binary.test"]):
        for raw, text in ds.read_label_first(os.path.join(datasets_dir, "sst2_cbu", name)):
            if raw not in ("0", "1"):
                continue
            out.append((s, int(raw), f"{prefix} {text}{cue}"))
    return out


def label_pool(words, tok):
    """[(word, id)] of the words that are one token with a leading space, first occurrence."""
    pool, seen, rejected = [], set(), []
    for w in words:
        ids = tok[" " + w]
        if len(ids) != 1:
            rejected.append(w)
            continue
        if ids[0] in seen:
            continue
        seen.add(ids[0])
        pool.append((w, ids[0]))
    return pool, rejected


def concat_check(args, examples, templates, pool, sep_ids, tok, sst2_rows):
    """Tokenises sampled whole demonstrations and compares them with their piece ids."""
    rng = np.random.default_rng([args.seed, 7])
    cases = []
    n = min(args.check_sample, len(examples))
    for i in rng.permutation(len(examples))[:n]:
        d, _, _, piece = examples[i]
        spec = ds.SPECS[d]
        word, wid = pool[int(rng.integers(len(pool)))]
        if spec.fixed_template:
            full, ids = piece + " " + word + SEPARATOR, tok[piece] + [wid] + sep_ids
        else:
            prefix, cue = templates[int(rng.integers(len(templates)))]
            full = prefix + piece + cue + " " + word + SEPARATOR
            ids = tok[prefix] + tok[piece] + tok[cue] + [wid] + sep_ids
        cases.append((full, ids))
    for i in rng.permutation(len(sst2_rows))[:min(n, len(sst2_rows))]:
        _, cls, text = sst2_rows[i]
        word = EVAL_WORDS[cls]
        cases.append((text + " " + word + SEPARATOR, tok[text] + tok[" " + word] + sep_ids))
    joint = gpt2_tokens.encode_many(args.tokenize, args.tokenizer_dir, [c[0] for c in cases])
    bad = [(c[0], c[1], j) for c, j in zip(cases, joint) if c[1] != j]
    if bad:
        text, ids, j = bad[0]
        raise SystemExit(f"prepare_data: piece ids differ from joint tokenisation in {len(bad)} "
                         f"of {len(cases)} demonstrations, e.g. {text!r}: {ids} vs {j}")
    # What the server avoids by tokenising per demonstration: two demonstrations tokenised as one
    # text differ from their concatenated ids (the separator's "\n\n" splits before text).
    pairs = [cases[i][0] + cases[i + 1][0] for i in range(0, min(40, len(cases) - 1), 2)]
    joint_pairs = gpt2_tokens.encode_many(args.tokenize, args.tokenizer_dir, pairs)
    differ = sum(1 for i, jp in zip(range(0, 2 * len(pairs), 2), joint_pairs)
                 if jp != cases[i][1] + cases[i + 1][1])
    return {"checked": len(cases), "equal": len(cases),
            "demonstration_pairs_checked": len(pairs),
            "demonstration_pairs_where_joint_tokenisation_differs": differ}


def main(argv=None):
    args = parse_args(argv)
    if not os.path.isdir(args.datasets_dir):
        raise SystemExit(f"prepare_data: no datasets folder {args.datasets_dir}")
    unread = check_folders(args.datasets_dir)
    sst2_sentences = ds.sst2_sentences(args.datasets_dir)
    sst2 = ds.Sst2Filter(sst2_sentences)
    examples, stats = collect_examples(args, sst2)
    sst2_rows = sst2_eval_examples(args.datasets_dir)

    tok = Tokens(args)
    templates = list(ds.TEMPLATE_POOL)
    for prefix, cue in templates:
        tok.want(prefix)
        tok.want(cue)
    tok.want(SEPARATOR)
    words = read_word_list(os.path.join(HERE, "label_words.txt"))
    for spec in ds.SPECS:
        words += spec.preset_words
    words += EVAL_WORDS
    for w in words:
        tok.want(" " + w)
    for _, _, _, piece in examples:
        tok.want(piece)
    for _, _, text in sst2_rows:
        tok.want(text)
    tok.run()

    sep_ids = tok[SEPARATOR]
    pool, rejected = label_pool(words, tok)
    pool_ids = {wid for _, wid in pool}
    eval_ids = [tok[" " + w][0] for w in EVAL_WORDS]
    assert all(i in pool_ids for i in eval_ids), "the evaluation's label words must be in the pool"

    # Drop inputs too long for an episode to hold several demonstrations. A one-field piece gets
    # a prefix and a cue of a few tokens around it: 8 tokens covers every template.
    kept = []
    for ex in examples:
        d, s, cls, piece = ex
        extra = 0 if ds.SPECS[d].fixed_template else 8
        if len(tok[piece]) + extra > args.max_input_tokens:
            stats[d]["dropped_long"] = stats[d].get("dropped_long", 0) + 1
            continue
        kept.append(ex)
    examples = kept

    os.makedirs(args.out, exist_ok=True)
    rows, flat = [], []
    offset = 0
    for d, s, cls, piece in examples:
        ids = tok[piece]
        rows.append((d, s, cls, offset, len(ids)))
        flat.extend(ids)
        offset += len(ids)
    for st in stats:
        st["kept"] = {"train": 0, "heldout": 0}
    for d, s, cls, _, _ in rows:
        stats[d]["kept"]["train" if s == 0 else "heldout"] += 1
    write_array(os.path.join(args.out, "tokens.u16"), np.asarray(flat, dtype="<u2"))
    write_array(os.path.join(args.out, "examples.i32"),
                np.asarray(rows, dtype="<i4").reshape(-1, 5))

    s_rows, s_flat = [], []
    offset = 0
    for s, cls, text in sst2_rows:
        ids = tok[text]
        s_rows.append((s, cls, offset, len(ids)))
        s_flat.extend(ids)
        offset += len(ids)
    write_array(os.path.join(args.out, "sst2.u16"), np.asarray(s_flat, dtype="<u2"))
    write_array(os.path.join(args.out, "sst2.i32"), np.asarray(s_rows, dtype="<i4").reshape(-1, 4))
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(args.tokenizer_dir, name), os.path.join(args.out, name))

    check = concat_check(args, examples, templates, pool, sep_ids, tok, sst2_rows)

    sources = {}
    for spec in ds.SPECS:
        for name in filter(None, [spec.train_file, spec.test_file]):
            rel = f"{spec.folder}/{name}"
            sources[rel] = sha256_file(os.path.join(args.datasets_dir, rel))
    for folder, files in ds.SST2_FILES.items():
        for name in files:
            path = os.path.join(args.datasets_dir, folder, name)
            if os.path.exists(path):
                sources[f"{folder}/{name}"] = sha256_file(path)

    index = {
        "format_version": FORMAT_VERSION,
        "generator": "tools/icl_model/prepare_data.py",
        "settings": {"max_per_split": args.max_per_split,
                     "max_input_tokens": args.max_input_tokens, "seed": args.seed},
        "bos_id": BOS,
        "separator": {"text": SEPARATOR, "ids": sep_ids},
        "answer_template": " {label}",
        "datasets": [
            {"name": spec.name, "folder": spec.folder, "train_file": spec.train_file,
             "test_file": spec.test_file or "(every tenth example of train_file)",
             "classes": len(spec.raw_labels), "raw_labels": spec.raw_labels,
             "preset_words": spec.preset_words,
             "template": ("fixed" if spec.fixed_template else "free"),
             "fixed_template": spec.fixed_template,
             "own_template": (templates.index(spec.template) if spec.template else -1),
             "stats": stats[d]}
            for d, spec in enumerate(ds.SPECS)],
        "excluded_folders": [{"pattern": p, "reason": r} for p, r in ds.EXCLUDED],
        "unread_folders": unread,
        "sst2_filter": {"sst2_sentences": len(sst2_sentences),
                        "rule": f"normalised (lower-case alphanumerics) text equal to an SST-2 "
                                f"sentence, or sharing a {ds.Sst2Filter.WINDOW}-character "
                                f"window with one"},
        "templates": [{"prefix": p, "cue": c, "prefix_ids": tok[p], "cue_ids": tok[c]}
                      for p, c in templates],
        "label_pool": [{"word": w, "id": i} for w, i in pool],
        "label_words_not_one_token": rejected,
        "sst2_eval": {"preset": "sst2_cbu", "input_template": "Sentence: {text}\nLabel:",
                      "words": EVAL_WORDS, "word_ids": eval_ids,
                      "splits": ["train", "dev", "test"],
                      "counts": [sum(1 for r in s_rows if r[0] == s) for s in range(3)]},
        "concatenation_check": check,
        "source_sha256": sources,
        "files": {name: {"bytes": os.path.getsize(os.path.join(args.out, name)),
                         "sha256": sha256_file(os.path.join(args.out, name))}
                  for name in ("tokens.u16", "examples.i32", "sst2.u16", "sst2.i32",
                               "vocab.json", "merges.txt")},
    }
    with open(os.path.join(args.out, "index.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(index, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
    total = sum(v["bytes"] for v in index["files"].values())
    print(f"prepare_data: {len(rows)} examples ({len(flat)} tokens) from {len(ds.SPECS)} datasets, "
          f"{len(s_rows)} SST-2 evaluation inputs, {len(pool)} label words, "
          f"{total / 2**20:.1f} MiB in {args.out}")
    for st in stats:
        print(f"  {st['name']:8s} kept train {st['kept']['train']:5d} heldout "
              f"{st['kept']['heldout']:4d}; dropped: SST-2 exact {st['dropped_sst2_exact']}, "
              f"window {st['dropped_sst2_window']}, long {st.get('dropped_long', 0)}")
    print(f"  piece concatenation == joint tokenisation on {check['checked']} demonstrations; "
          f"{check['demonstration_pairs_where_joint_tokenisation_differs']} of "
          f"{check['demonstration_pairs_checked']} demonstration pairs tokenised as one text "
          f"differ (why episodes are built per demonstration)")


def write_array(path, array):
    with open(path, "wb") as f:
        f.write(np.ascontiguousarray(array).tobytes())


if __name__ == "__main__":
    main()
