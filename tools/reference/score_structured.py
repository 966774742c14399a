"""Scores one many-shot case with the NumPy reference, for tests that drive the engine from text.

Reads a JSON case on stdin:
  {"model_dir": DIR, "mode": "STRUCTURED" | "PARALLEL" | "CONVENTIONAL",
   "alignment": "TRUNCATE" | ..., "group_length": L, "shuffle_seed": S,
   "long_demonstrations": "REJECT" | "TRUNCATE", "rescale_factor": null | f,
   "bos_id": B, "space_id": P, "eos_id": E,
   "demonstrations": [[ids..], ..], "queries": [{"tokens": [..], "candidates": [[..], ..]}, ..]}
and writes the case back as JSON on stdout, each query with its candidates' "sum_logprob",
"mean_logprob" and "probability" from the reference (make_structured_goldens.run_case: the
layout and scores the goldens use). The token ids are the caller's; the reference never
tokenizes. Run with /usr/bin/python3 (numpy).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_structured_goldens as goldens  # noqa: E402
import reference  # noqa: E402

SETTINGS = ["alignment", "group_length", "shuffle_seed", "long_demonstrations", "mode",
            "rescale_factor", "bos_id", "space_id", "eos_id"]


def main():
    case = json.load(sys.stdin)
    model = reference.load_model(case["model_dir"])
    settings = {key: case[key] for key in SETTINGS}
    settings["name"] = "scored"
    scored, _ = goldens.run_case(model, settings, case["demonstrations"], case["queries"])
    json.dump(scored, sys.stdout)


if __name__ == "__main__":
    main()
