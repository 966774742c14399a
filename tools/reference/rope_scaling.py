"""RoPE scaling as transformers' modeling_rope_utils.py computes it (the 4.4x-4.5x releases).

Written from HF's Python (its float32 torch ops, mirrored here with NumPy float32 arrays and
scalars rounded to float32 where torch rounds them), independently of manyshot's C++
(engine/model/rope_scaling.cc), so each checks the other.

rope_parameters(config) -> (inv_freq float64 array of head_dim / 2, attention_factor) or None for
plain RoPE (reference.py then keeps its float64 table). "dynamic" equals plain RoPE for every
sequence up to max_position_embeddings (HF only rebuilds the table beyond it), so it returns the
float32 plain table HF holds at init.

Run with /usr/bin/python3 (numpy); `--golden` prints tests/golden/rope_scaling.json.
"""

import argparse
import json
import math

import numpy as np

f32 = np.float32


def _plain_f32(theta, dim):
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(f32) / f32(dim)
    return (f32(1.0) / (f32(theta) ** exponent)).astype(f32)


def _linear(rs, theta, dim, max_pos):
    return _plain_f32(theta, dim) / f32(rs["factor"]), 1.0


def _dynamic(rs, theta, dim, max_pos):
    # seq_len = max(len, max_pos) = max_pos: base * (factor * 1 - (factor - 1)) ** (d / (d - 2)).
    factor = rs["factor"]
    base = theta * ((factor * max_pos / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return _plain_f32(base, dim), 1.0


def _llama3(rs, theta, dim, max_pos):
    inv = _plain_f32(theta, dim)
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = f32(old / lo), f32(old / hi)
    wavelen = f32(2 * math.pi) / inv
    scaled = np.where(wavelen > low_wavelen, inv / f32(factor), inv).astype(f32)
    smooth = (f32(old) / wavelen - f32(lo)) / f32(hi - lo)
    smoothed = (f32(1) - smooth) * scaled / f32(factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32), 1.0


def _yarn_mscale(scale, m=1.0):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def _yarn(rs, theta, dim, max_pos):
    factor = rs["factor"]
    original = max_pos
    if "original_max_position_embeddings" in rs:
        original = rs["original_max_position_embeddings"]
        factor = max_pos / original
    attention = rs.get("attention_factor")
    if attention is None:
        ms, ms_all = rs.get("mscale"), rs.get("mscale_all_dim")
        if ms and ms_all:
            attention = _yarn_mscale(factor, ms) / _yarn_mscale(factor, ms_all)
        else:
            attention = _yarn_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def corr(rot):
        return dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(theta))

    low, high = corr(beta_fast), corr(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos = f32(theta) ** (np.arange(0, dim, 2).astype(f32) / f32(dim))
    extra = f32(1) / pos
    inter = f32(1) / (f32(factor) * pos)
    ramp = np.clip((np.arange(dim // 2, dtype=f32) - f32(low)) / f32(high - low), 0, 1).astype(f32)
    share = f32(1) - ramp
    return (inter * (f32(1) - share) + extra * share).astype(f32), float(attention)


_TYPES = {"linear": _linear, "dynamic": _dynamic, "llama3": _llama3, "yarn": _yarn}


def rope_parameters(config, head_dim):
    rs = config.get("rope_scaling")
    if not rs:
        return None
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return None
    if kind not in _TYPES:
        raise NotImplementedError(f"rope_type {kind}")
    theta = float(config.get("rope_theta", 10000.0))
    inv, attention = _TYPES[kind](rs, theta, head_dim, config["max_position_embeddings"])
    return np.asarray(inv, dtype=np.float64), attention


# Unit-test cases (tests/engine/model/rope_scaling_test.cc): real checkpoints' settings and the
# corners of each formula.
GOLDEN_CASES = [
    ("linear", 10000.0, 64, 4096, {"rope_type": "linear", "factor": 4.0}),
    ("linear_legacy_type_key", 10000.0, 16, 2048, {"type": "linear", "factor": 2.5}),
    ("dynamic", 10000.0, 128, 4096, {"rope_type": "dynamic", "factor": 2.0}),
    ("llama3_1", 500000.0, 128, 131072,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}),
    ("llama3_tiny", 10000.0, 16, 2048,
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 256}),
    ("yarn_qwen2_5", 1000000.0, 128, 131072,
     {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    ("yarn_factor_only", 10000.0, 64, 4096, {"rope_type": "yarn", "factor": 8.0}),
    ("yarn_mscale", 10000.0, 64, 163840,
     {"rope_type": "yarn", "factor": 40.0, "mscale": 0.707, "mscale_all_dim": 1.0,
      "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}),
    ("yarn_attention_untruncated", 10000.0, 16, 2048,
     {"rope_type": "yarn", "factor": 8.0, "attention_factor": 1.5, "beta_fast": 16.0,
      "beta_slow": 2.0, "truncate": False}),
]


def golden():
    cases = []
    for name, theta, dim, max_pos, rs in GOLDEN_CASES:
        config = dict(rope_theta=theta, max_position_embeddings=max_pos, rope_scaling=rs)
        inv, attention = rope_parameters(config, dim)
        cases.append(dict(name=name, rope_theta=theta, head_dim=dim,
                          max_position_embeddings=max_pos, rope_scaling=rs,
                          inv_freq=[float(v) for v in inv], attention_factor=attention))
    return dict(regenerate="/usr/bin/python3 tools/reference/rope_scaling.py --golden > "
                "tests/golden/rope_scaling.json", cases=cases)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--golden", action="store_true")
    if ap.parse_args().golden:
        print(json.dumps(golden(), indent=1))
