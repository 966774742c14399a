#!/usr/bin/python3
"""Builds tests/data/tokenizer/parity_sentences.txt: the lines every tokenizer parity test uses.

Real sentences come from ../shared/datasets (each file stays under its original dataset terms;
see ../shared/datasets/SOURCES.md: research ICL datasets, used here as short text excerpts for
testing only). Labels are stripped; only the text column is kept. Lines are taken with a fixed
stride, so the output is deterministic. Hand-written edge lines (emoji, CJK, Arabic, combining
marks, whitespace runs, numbers, contractions) are appended at the end.

Usage: /usr/bin/python3 tools/tokenizer_parity/build_parity_sentences.py [shared_dir] [out]
"""
import csv
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests/data/tokenizer/parity_sentences.txt")
DS = os.path.join(SHARED, "datasets")


def stride(items, count):
    """Every k-th item so that about `count` items spread over the whole file."""
    step = max(1, len(items) // count)
    return items[::step][:count]


def read_lines(rel):
    # Some harvardnlp files are Windows-1252: decode each line as UTF-8, else as cp1252.
    out = []
    with open(os.path.join(DS, rel), "rb") as f:
        for raw in f:
            raw = raw.rstrip(b"\n")
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(raw.decode("cp1252", errors="replace"))
    return out


def after_label(lines):
    # "1 some text" / "DESC:manner How ..." -> the text after the first space.
    return [line.split(" ", 1)[1] for line in lines if " " in line]


def jsonl(rel, *keys):
    out = []
    for line in read_lines(rel):
        obj = json.loads(line)
        for key in keys:
            out.extend(obj[key].split("\n"))
    return out


def agnews():
    with open(os.path.join(DS, "agnews_cbu/test.csv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))[1:]
    return [row[1] + ". " + row[2] for row in rows]


EDGE_LINES = [
    # Emoji: single, ZWJ families, skin tones, flags, keycaps, variation selectors.
    "I love it 😀😃😄 so much!",
    "family: 👨‍👩‍👧‍👦 and 👩‍❤️‍💋‍👨 together",
    "thumbs 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 up",
    "flags 🇺🇸🇫🇷🇯🇵 and keycap 1️⃣ #️⃣",
    "❤️ vs ❤ and ☺️",
    "🧑🏽‍💻 writes code; 🏳️‍🌈 flies",
    # CJK, Japanese, Korean, Thai, Devanagari, Hebrew, Arabic, Cyrillic, Greek.
    "我爱自然语言处理。今天天气很好！",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 문장입니다. 감사합니다!",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "हिन्दी भाषा में वाक्य।",
    "שלום עולם, מה שלומך?",
    "مرحبا بالعالم، كيف حالك؟ ١٢٣",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Ελληνικά: Καλημέρα κόσμε",
    # Combining marks and normalization-sensitive text.
    "cafe\u0301 vs café",
    "e\u0301e\u0301e\u0301 and a\u0308o\u0308u\u0308",
    "Z\u0351\u036b\u0343\u036a\u0302a\u0310l\u0357g\u0310o\u0352 text",
    "ﬁ ligature and ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    # Whitespace runs, tabs, and other spaces inside one line.
    "two  spaces   three    four     five",
    "tab\there\t\tand\t \tmixed",
    "   leading spaces",
    "trailing spaces   ",
    " one leading and one trailing ",
    "\tleading tab",
    "no-break\u00a0space and\u2003em space and\u3000ideographic",
    "thin\u2009space\u200bzero width\u200cnon-joiner\u200djoiner",
    # Numbers.
    "1234567890 12.5% -3.14e10 1,000,000 0x1F 2024-01-01",
    "Call 555-0123 or +1 (800) 123-4567 at 10:30pm",
    "Roman Ⅻ and superscript x² and fractions ½ ¾ and ① ② ③",
    "٣ Arabic-Indic and ४२ Devanagari digits",
    # Contractions, including upper case and curly apostrophes.
    "it's don't we're they've I'm you'll he'd",
    "IT'S DON'T WE'RE THEY'VE I'M YOU'LL HE'D",
    "it’s don’t we’re (curly)",
    "'s 't 're 've 'm 'll 'd at the start",
    "rock 'n' roll, the '90s, o'clock",
    # Punctuation runs and code-like text.
    "!!!??? ... --- *** ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
    "def f(x): return x**2 + 1  # comment",
    "<html><body class=\"a\">Hello &amp; bye</body></html>",
    "https://example.com/path?q=1&r=2#frag user@example.com",
    "C:\\Windows\\System32 and /usr/local/bin",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "<s> </s> <unk> [CLS] [SEP] <pad> look like special tokens",
    # Long repeated characters (stress BPE).
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "=================================================================",
    "ab" * 40,
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    # Mixed scripts and symbols.
    "Mixed: English, 中文, العربية, русский, 😀, and math ∑∫√∞≠≤≥",
    "Currency € £ ¥ ₹ ₿ ¢ and symbols © ® ™ § ¶ † ‡ •",
    "Box drawing ┌─┐│└─┘ and arrows ← → ↑ ↓ ⇒",
    "Music 𝄞 and math letters 𝐀𝐁𝐂 𝕏 and old italic 𐌰𐌱",
    "Private use \ue000 and rare CJK 𠀀𠀁",
    "a",
    " ",
    "  ",
    "x y",
]


def main():
    lines = []
    lines += stride(after_label(read_lines("sst2_cbu/stsa.binary.train")), 2400)
    lines += stride(after_label(read_lines("trec_cbu/train.txt")), 1400)
    lines += stride(agnews(), 2000)
    lines += stride(after_label(read_lines("subj_harvard/subj.all")), 1100)
    lines += stride(after_label(read_lines("mr_harvard/rt-polarity.all")), 1100)
    lines += stride(after_label(read_lines("cr_mpqa_harvard/custrev.all")), 400)
    lines += stride(jsonl("rte_cbu/train.jsonl", "premise", "hypothesis"), 900)
    lines += stride([l for l in jsonl("boolq_dataicl/boolq_500_0_train.jsonl", "input")
                     if len(l) > 20], 900)
    # Lines must be single lines; blank lines are kept out (they carry no signal).
    lines = [l for l in lines if l and "\n" not in l and "\r" not in l]
    lines += EDGE_LINES
    with open(OUT, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")
    print(f"wrote {len(lines)} lines, {os.path.getsize(OUT)} bytes to {OUT}")


if __name__ == "__main__":
    main()
