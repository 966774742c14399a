"""Which datasets of ../shared/datasets the ICL model trains on, and how they are read.

The readers follow `manyshot eval`'s presets (client/eval/presets.cc, client/eval/dataset.cc):
label-first lines ("LABEL TEXT": split at the first space or tab, both sides stripped, a line that
is not valid UTF-8 read as Latin-1), JSONL with named fields, the same raw label values, and the
same held-out rule where a folder has no test file (every tenth example, the 10th, 20th, ...).

SST-2 is the evaluation task and is held out entirely:
  * every sst2_* folder is excluded;
  * every sst5_* folder is excluded too: SST-5 holds the same sentences (SST-2 is SST-5 without its
    neutral class, binarised), so training on it would be training on SST-2;
  * MR and Subj come from the same Rotten Tomatoes reviews as SST: most MR sentences ARE SST-2
    sentences (8662 mr_lu training lines: 6136 identical after normalisation, 936 more sharing a
    40-character run). Every example of every dataset is dropped when its normalised text equals
    an SST-2 sentence (train, dev or test, both copies) or shares a 40-character window with one
    (Sst2Filter).
Folders that duplicate a dataset read from another folder are skipped (EXCLUDED says which).

Runs with /usr/bin/python3; no third-party modules.
"""

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field

# Templates whose text is one field: (prefix, cue) pieces around " {text}". Every prefix ends in
# ':' and every cue is "\n<Word>:", so a demonstration "PREFIX TEXT\nCUE LABEL\n\n" splits into
# pieces at boundaries GPT-2's pre-tokenizer never merges across (see prepare_data.py).
SST2_TEMPLATE = ("Sentence:", "\nLabel:")  # sst2_cbu's "Sentence: {text}\nLabel:"
TEMPLATE_POOL = [
    SST2_TEMPLATE,
    ("Review:", "\nSentiment:"),   # MR, CR, MPQA presets
    ("Input:", "\nType:"),         # Subj, DBPedia presets
    ("Question:", "\nType:"),      # TREC preset
    ("News:", "\nType:"),          # AGNews preset, without its category-naming instruction
    ("Text:", "\nLabel:"),
    ("Input:", "\nLabel:"),
    ("Review:", "\nLabel:"),
    ("Sentence:", "\nAnswer:"),
    ("Text:", "\nCategory:"),
    ("Input:", "\nOutput:"),
    ("Text:", "\nClass:"),
]


@dataclass
class Spec:
    name: str
    folder: str
    train_file: str
    test_file: str  # "" = every tenth example of train_file is held out
    layout: str     # "label_first" or "jsonl"
    raw_labels: list  # raw label values, in class order (the preset's order)
    preset_words: list  # the preset's label words for those classes (kept for reference)
    template: tuple = None  # (prefix, cue) from TEMPLATE_POOL: a one-field dataset
    fixed_template: str = ""  # a several-field dataset: rendered whole, e.g. "{premise} ..."
    text_field: str = "text"
    fields: dict = field(default_factory=dict)  # placeholder -> JSON field
    label_field: str = "label"
    label_delimiter: str = ""


SPECS = [
    Spec("mr", "mr_harvard", "rt-polarity.all", "", "label_first", ["0", "1"],
         ["Negative", "Positive"], template=("Review:", "\nSentiment:")),
    Spec("cr", "cr_mpqa_harvard", "custrev.all", "", "label_first", ["0", "1"],
         ["negative", "positive"], template=("Review:", "\nSentiment:")),
    Spec("mpqa", "cr_mpqa_harvard", "mpqa.all", "", "label_first", ["0", "1"],
         ["negative", "positive"], template=("Review:", "\nSentiment:")),
    Spec("subj", "subj_harvard", "subj.all", "", "label_first", ["1", "0"],
         ["objective", "subjective"], template=("Input:", "\nType:")),
    Spec("trec", "trec_harvard", "TREC.train.all", "TREC.test.all", "label_first",
         ["0", "1", "2", "3", "4", "5"],
         ["Description", "Entity", "Expression", "Person", "Location", "Number"],
         template=("Question:", "\nType:")),
    Spec("agnews", "agnews_lu", "test.jsonl", "dev_subsample.jsonl", "jsonl", ["1", "2", "3", "4"],
         ["World", "Sports", "Business", "Technology"], template=("News:", "\nType:"),
         text_field="sentence"),
    Spec("dbpedia", "dbpedia_lu", "dev_subsample.jsonl", "", "jsonl",
         [str(i) for i in range(1, 15)],
         ["company", "school", "artist", "athlete", "politics", "transportation", "building",
          "nature", "village", "animal", "plant", "album", "film", "book"],
         template=("Input:", "\nType:"), text_field="sentence"),
    Spec("cb", "cb_cbu", "train.jsonl", "val.jsonl", "jsonl",
         ["entailment", "contradiction", "neutral"], ["True", "False", "Neither"],
         fixed_template="{premise} Question: {hypothesis} True, False, or Neither?\nAnswer:",
         fields={"premise": "premise", "hypothesis": "hypothesis"}),
    Spec("rte", "rte_cbu", "train.jsonl", "val.jsonl", "jsonl", ["entailment", "not_entailment"],
         ["Yes", "No"],
         fixed_template="Passage: {premise}\nQuestion: {hypothesis} Yes or No?\nAnswer:",
         fields={"premise": "premise", "hypothesis": "hypothesis"}),
    # DataICL inputs arrive templated and end in the question; "\nAnswer:" gives them the same
    # input-line / cue-line shape as the others.
    Spec("boolq", "boolq_dataicl", "boolq_500_0_train.jsonl", "boolq_500_0_dev.jsonl", "jsonl",
         ["no", "yes"], ["no", "yes"], fixed_template="{input}\nAnswer:",
         fields={"input": "input"}, label_field="output"),
]

# Folders of ../shared/datasets not read, and why. Patterns use fnmatch.
EXCLUDED = [
    ("sst2_*", "SST-2: the evaluation task, held out entirely"),
    ("sst5_*", "SST-5 contains the SST-2 sentences (SST-2 is SST-5 without neutral, binarised)"),
    ("mr_lu", "a split of mr_harvard's sentences (read from mr_harvard)"),
    ("cr_lu", "a split of cr_mpqa_harvard/custrev.all (read from there)"),
    ("mpqa_lu", "a split of cr_mpqa_harvard/mpqa.all (read from there)"),
    ("subj_lu", "a split of subj_harvard's sentences (read from subj_harvard)"),
    ("subj_dataicl", "Subj sentences again, templated (read from subj_harvard)"),
    ("trec_lu", "TREC again (read from trec_harvard)"),
    ("trec_cbu", "TREC again, fine-grained labels (read from trec_harvard)"),
    ("agnews_cbu", "AGNews test set again (read from agnews_lu)"),
    ("agnews_dataicl", "AGNews again, templated (read from agnews_lu)"),
    ("dbpedia_cbu", "no examples"),
    ("rte_lu", "RTE again (read from rte_cbu)"),
    ("label_configs_lu", "label words and templates, no examples"),
]

SST2_FILES = {  # every copy of SST-2 in the datasets folder, for the overlap filter
    "sst2_cbu": ["stsa.binary.train", "stsa.binary.dev", "stsa.binary.test"],
    "sst2_dataicl": ["glue-sst2_500_0_train.jsonl", "glue-sst2_500_0_dev.jsonl",
                     "glue-sst2_500_0_test.jsonl"],
}


def excluded_reason(folder):
    for pattern, reason in EXCLUDED:
        if fnmatch.fnmatch(folder, pattern):
            return reason
    return None


def ascii_strip(text):
    """absl::StripAsciiWhitespace, as the presets strip label-first lines."""
    return text.strip(" \t\n\v\f\r")


def decode_line(raw):
    """A line as the presets read it: UTF-8, or Latin-1 (one code point per byte) if invalid."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def read_label_first(path, delimiter=""):
    """[(raw_label, text)] from "LABEL TEXT" lines, as ParseLabelFirstLines."""
    records = []
    with open(path, "rb") as f:
        content = f.read()
    for raw in content.split(b"\n"):
        line = ascii_strip(decode_line(raw))
        if not line:
            continue
        m = re.search(r"[ \t]", line)
        if m is None:
            continue  # a label without a sentence is no example
        label = line[:m.start()]
        if delimiter:
            label = label.split(delimiter, 1)[0]
        records.append((label, ascii_strip(line[m.start():])))
    return records


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def hold_out_every_tenth(items):
    """(train, held_out) as HoldOutEveryTenth: the 10th, 20th, ... item is held out."""
    train = [x for i, x in enumerate(items) if (i + 1) % 10 != 0]
    held = [x for i, x in enumerate(items) if (i + 1) % 10 == 0]
    return train, held


def read_split(spec, datasets_dir, file_name):
    """[(raw_label, record)] where record is the text (one-field) or a {placeholder: value} dict."""
    path = os.path.join(datasets_dir, spec.folder, file_name)
    if spec.layout == "label_first":
        return [(label, text) for label, text in read_label_first(path, spec.label_delimiter)]
    out = []
    for row in read_jsonl(path):
        label = row.get(spec.label_field)
        if label is None:
            continue  # unlabelled (CB / RTE test files)
        if spec.fields:
            out.append((str(label), {k: str(row[v]) for k, v in spec.fields.items()}))
        else:
            out.append((str(label), str(row[spec.text_field])))
    return out


def read_dataset(spec, datasets_dir):
    """{"train": [(class_index, record)], "heldout": [...]} plus the count of unknown labels."""
    train = read_split(spec, datasets_dir, spec.train_file)
    if spec.test_file:
        held = read_split(spec, datasets_dir, spec.test_file)
    else:
        train, held = hold_out_every_tenth(train)
    index = {raw: i for i, raw in enumerate(spec.raw_labels)}
    unknown = 0
    out = {}
    for split, rows in (("train", train), ("heldout", held)):
        kept = []
        for raw, record in rows:
            if raw not in index:
                unknown += 1
                continue
            kept.append((index[raw], record))
        out[split] = kept
    return out, unknown


def record_text(spec, record):
    """The text the SST-2 filter compares: the one field, or all fields joined."""
    if isinstance(record, dict):
        return " ".join(record[k] for k in sorted(record))
    return record


def render_fixed(spec, record):
    text = spec.fixed_template
    for name, value in record.items():
        text = text.replace("{" + name + "}", value.strip())
    return text


# ------------------------------------------------------------------------------------------------
# SST-2 sentences and the overlap filter
# ------------------------------------------------------------------------------------------------

def normalise(text):
    """Lower-case alphanumerics only: "won't" and SST's "wo n't" both become "wont"."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def sst2_sentences(datasets_dir):
    """Every SST-2 sentence in the datasets folder (both copies, all splits)."""
    out = []
    for folder, files in SST2_FILES.items():
        for name in files:
            path = os.path.join(datasets_dir, folder, name)
            if not os.path.exists(path):
                continue
            if name.endswith(".jsonl"):
                for row in read_jsonl(path):
                    text = row["input"]
                    # DataICL: "Review: SENTENCE \nSentiment:"
                    text = re.sub(r"^Review: ", "", text)
                    text = re.sub(r"\s*\nSentiment:$", "", text)
                    out.append(text)
            else:
                out.extend(text for _, text in read_label_first(path))
    return out


class Sst2Filter:
    """Is a text an SST-2 sentence, or does it share a WINDOW-character run with one (both
    normalised)? Short SST-2 sentences (< WINDOW characters) only match exactly."""

    WINDOW = 40

    def __init__(self, sentences):
        self.exact = set()
        self.windows = set()
        for s in sentences:
            n = normalise(s)
            if not n:
                continue
            self.exact.add(n)
            for i in range(0, len(n) - self.WINDOW + 1):
                self.windows.add(n[i:i + self.WINDOW])
        if not self.exact:
            raise ValueError("no SST-2 sentences found: cannot check the training data against "
                             "them (is --datasets_dir right?)")

    def reason(self, text):
        """None when the text is clear of SST-2, else "exact" or "window"."""
        n = normalise(text)
        if n in self.exact:
            return "exact"
        w = self.WINDOW
        for i in range(0, len(n) - w + 1):
            if n[i:i + w] in self.windows:
                return "window"
        return None
