"""The command line the data tests share: the tokenize binary, the tokenizer and the datasets
folder; without ../shared/datasets a test reports SKIPPED (exit 77, ctest's SKIP_RETURN_CODE)."""
import argparse
import os
import sys
import unittest


def run(test_module):
    """Parses the flags into test_module.ARGS, runs the module's tests; returns the exit status."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenize", required=True)
    ap.add_argument("--tokenizer_dir", default="/usr/local/share/manyshot/gpt2")
    ap.add_argument("--datasets_dir", required=True)
    args, rest = ap.parse_known_args()
    if not os.path.isdir(os.path.join(args.datasets_dir, "sst2_cbu")):
        print(f"SKIPPED: no datasets in {args.datasets_dir}")
        return 77
    test_module.ARGS = args
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    return 0 if result.wasSuccessful() else 1
