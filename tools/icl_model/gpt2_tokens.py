"""GPT-2 token ids for Python scripts, through the project's own tokenizer.

encode_many() pipes text through the `tokenize` binary (build/tools/tokenize: the engine's exact
GPT-2 BPE, the one the server runs), so training data is tokenised exactly as the server will
tokenise it. decode() maps ids back to text from vocab.json alone (GPT-2's byte-level alphabet),
which the tests use to read a data file back without trusting the code that wrote it.

Runs with /usr/bin/python3; no third-party modules.
"""

import json
import os
import subprocess


def encode_many(tokenize_binary, tokenizer_dir, texts):
    """[text] -> [[id]]; one process for the whole list. Raises on any tokenizer error."""
    if not texts:
        return []
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    proc = subprocess.run([tokenize_binary, f"--tokenizer_dir={tokenizer_dir}"], input=stdin,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{tokenize_binary} failed: {proc.stderr.strip()}")
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    if len(rows) != len(texts):
        raise RuntimeError(f"tokenize returned {len(rows)} rows for {len(texts)} texts")
    return rows


def _byte_decoder():
    """GPT-2's bytes_to_unicode table, inverted: printable stand-in character -> byte."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) +
                 list(range(ord("\xae"), ord("\xff") + 1)))
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class Decoder:
    def __init__(self, tokenizer_dir):
        with open(os.path.join(tokenizer_dir, "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        self.id_to_token = {i: t for t, i in vocab.items()}
        self.byte_of = _byte_decoder()

    def token_bytes(self, token_id):
        return bytes(self.byte_of[c] for c in self.id_to_token[int(token_id)])

    def decode(self, ids):
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8")
