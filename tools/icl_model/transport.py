#!/usr/bin/python3
"""Moves a model directory through the device run's output limits (at most 8 files of at most
16 MiB come back) and puts it together again here.

  transport.py split SRC_DIR DST_DIR [--part_bytes=N] [--skip=NAME ...]
      copy SRC to DST, cutting every file larger than N bytes into NAME.part1ofK, NAME.part2ofK..
  transport.py join DIR [--manifest=PROVENANCE.json]
      concatenate the parts back into NAME (removing them) and, with a manifest
      ({"files": {NAME: {"sha256": ...}}}), check every file's sha256

Needed because a safetensors shard never splits a tensor, and GPT-2's token embedding alone is
50257 x n_embd (24.5 MiB in bf16 at n_embd 256): its shard is larger than what comes back.
"""

import argparse
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from file_hash import sha256_file  # noqa: E402

PART = re.compile(r"^(?P<name>.+)\.part(?P<i>\d+)of(?P<k>\d+)$")
DEFAULT_PART_BYTES = 15 * 2**20


def split_dir(src, dst, part_bytes=DEFAULT_PART_BYTES, skip=()):
    """Returns the names written to dst. Files named in `skip` are left out."""
    os.makedirs(dst, exist_ok=True)
    written = []
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path) or name in skip:
            continue
        size = os.path.getsize(path)
        if size <= part_bytes:
            shutil.copyfile(path, os.path.join(dst, name))
            written.append(name)
            continue
        k = (size + part_bytes - 1) // part_bytes
        with open(path, "rb") as f:
            for i in range(1, k + 1):
                part = f"{name}.part{i}of{k}"
                with open(os.path.join(dst, part), "wb") as out:
                    out.write(f.read(part_bytes))
                written.append(part)
    return written


def join_dir(directory, manifest=None):
    """Joins every complete set of parts; returns the joined names. Raises on a missing part or a
    sha256 that differs from the manifest's."""
    groups = {}
    for name in os.listdir(directory):
        m = PART.match(name)
        if m:
            groups.setdefault((m["name"], int(m["k"])), {})[int(m["i"])] = name
    joined = []
    for (name, k), parts in sorted(groups.items()):
        missing = [i for i in range(1, k + 1) if i not in parts]
        if missing:
            raise ValueError(f"{name}: parts {missing} of {k} are missing")
        with open(os.path.join(directory, name), "wb") as out:
            for i in range(1, k + 1):
                with open(os.path.join(directory, parts[i]), "rb") as f:
                    shutil.copyfileobj(f, out)
        for i in range(1, k + 1):
            os.remove(os.path.join(directory, parts[i]))
        joined.append(name)
    if manifest:
        with open(manifest, encoding="utf-8") as f:
            files = json.load(f)["files"]
        for name, info in sorted(files.items()):
            path = os.path.join(directory, name)
            if not os.path.exists(path):
                continue  # e.g. tokenizer files added after the run
            digest = sha256_file(path)
            if digest != info["sha256"]:
                raise ValueError(f"{path}: sha256 {digest}, the run wrote {info['sha256']}")
    return joined


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("--part_bytes", type=int, default=DEFAULT_PART_BYTES)
    s.add_argument("--skip", action="append", default=[], help="a file name to leave out")
    j = sub.add_parser("join")
    j.add_argument("dir")
    j.add_argument("--manifest", default="")
    args = ap.parse_args(argv)
    if args.cmd == "split":
        for name in split_dir(args.src, args.dst, args.part_bytes, args.skip):
            print(name)
    else:
        joined = join_dir(args.dir, args.manifest or None)
        print(f"joined {len(joined)} file(s): {' '.join(joined)}"
              + (" (sha256 checked against the manifest)" if args.manifest else ""))


if __name__ == "__main__":
    sys.exit(main())
