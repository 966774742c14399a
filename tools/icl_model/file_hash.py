"""sha256 of a file, read in 1 MiB blocks: the digests that index.json, PROVENANCE.json and
transport.py's manifest record (sha256, as ../shared's SOURCES.md records its files)."""
import hashlib


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
