"""Dense NumPy reference for SAICL, FiD, ensemble and group-FiD on T5.

Written from the paper ("Scaling In-Context Demonstrations with Structured Attention",
../shared/papers/004_e0269eeed24e0d93.txt), not from manyshot's C++:

- Segments (Appendix C): every demonstration and the test input truncated to the segment length
  S (keeping the last S tokens, the project's truncation of long demonstrations) and PADDED to S
  with pad_token_id, as the paper does; the padding is masked as a key everywhere.
- SAICL (Appendix B's StructuredAttention): one dense [heads, T, T] additive bias over the padded
  sequence [demo_1, ..., demo_k, test], T = (k + 1) S, built block by block as the pseudo-code
  builds its scores: the diagonal blocks get calculate_position_bias(S, S) (T5's bidirectional
  bias for positions 0 .. S-1 inside the segment) plus the key mask; a demonstration's row block
  against the test segment gets the key mask only; the test segment's row block against every
  demonstration gets the key mask only; every other block is -inf. One softmax per row over the
  whole row (which is the pseudo-code's softmax over its concatenated blocks).
- Full attention (CONVENTIONAL, FiD, group-FiD without SAICL): T5's own encoder over the prompt's
  segments concatenated (no padding between them).
- The decoder reads the encoder states of every prompt (FiD, group-FiD, SAICL: concatenated;
  padding rows dropped, which is what masking them in cross-attention does); ENSEMBLE scores
  each prompt separately and averages the candidates' log-probabilities.

Run with /usr/bin/python3 (numpy); no other dependencies.
"""

import numpy as np


def segment(ids, length):
    """The last `length` tokens of ids (the project's truncation of a long sample)."""
    return list(ids[-length:]) if len(ids) > length else list(ids)


def encode_with_bias(model, ids, bias):
    """T5Model.encode with a given [heads, T, T] bias instead of the relative position bias."""
    x = model.shared[np.asarray(ids)]
    for b in range(model.layers):
        p = f"encoder.block.{b}"
        h = model.norm(x, p + ".layer.0.layer_norm.weight")
        x = x + model.attention(h, h, p + ".layer.0.SelfAttention", bias)
        x = x + model.feed_forward(model.norm(x, p + ".layer.1.layer_norm.weight"),
                                   p + ".layer.1.DenseReluDense")
    return model.norm(x, "encoder.final_layer_norm.weight")


def saicl_bias(model, lengths, seg_len):
    """The dense SAICL bias of padded segments (the last one the test) with these real lengths."""
    n_seg = len(lengths)
    total = n_seg * seg_len
    neg = -np.inf
    key_mask = np.full(total, neg)
    for s, n in enumerate(lengths):
        key_mask[s * seg_len:s * seg_len + n] = 0.0
    diag = model.position_bias("encoder", seg_len, seg_len, 0, bidirectional=True)
    bias = np.full((model.heads, total, total), neg)
    test = slice((n_seg - 1) * seg_len, total)
    for s in range(n_seg):
        rows = slice(s * seg_len, (s + 1) * seg_len)
        bias[:, rows, rows] = diag + key_mask[rows][None, None, :]
        if s < n_seg - 1:  # demonstration -> test segment, no position bias
            bias[:, rows, test] = key_mask[test][None, None, :]
    demos = slice(0, (n_seg - 1) * seg_len)  # test -> every demonstration, no position bias
    bias[:, test, demos] = key_mask[demos][None, None, :]
    return bias


def encode_saicl(model, demos, test, seg_len):
    """Encoder states of the real (non-pad) rows, in order, for SAICL over demos + test."""
    segments = [segment(d, seg_len) for d in demos] + [segment(test, seg_len)]
    pad = model.c.get("pad_token_id", 0)
    ids, keep = [], []
    for s in segments:
        keep.extend(range(len(ids), len(ids) + len(s)))
        ids.extend(s + [pad] * (seg_len - len(s)))
    states = encode_with_bias(model, ids, saicl_bias(model, [len(s) for s in segments], seg_len))
    return states[keep]


def encode_full(model, demos, test, seg_len):
    """T5's full attention over the segments concatenated."""
    ids = [t for d in demos for t in segment(d, seg_len)] + segment(test, seg_len)
    return model.encode(ids)


def split_groups(k, groups):
    out, start = [], 0
    for g in range(groups):
        size = k // groups + (1 if g < k % groups else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def prompt_states(model, mode, demos, test, seg_len, groups=0, group_attention="saicl"):
    """Per prompt, its encoder states (demonstrations then the test segment), for each mode."""
    k = len(demos)
    if mode == "CONVENTIONAL":
        return [encode_full(model, demos, test, seg_len)]
    if mode == "SAICL":
        return [encode_saicl(model, demos, test, seg_len)]
    if mode == "FID" or (mode == "ENSEMBLE" and groups == 0):
        return [encode_full(model, [d], test, seg_len) for d in demos]
    encode = encode_saicl if group_attention == "saicl" else encode_full
    return [encode(model, [demos[i] for i in g], test, seg_len) for g in split_groups(k, groups)]


def score(model, mode, prompts, candidates):
    """(sum, mean) log-probability per candidate: ENSEMBLE averages over prompts."""
    if mode == "ENSEMBLE":
        per_prompt = [[model.score(p, c) for c in candidates] for p in prompts]
        return [(float(np.mean([pp[i][0] for pp in per_prompt])),
                 float(np.mean([pp[i][1] for pp in per_prompt]))) for i in range(len(candidates))]
    states = np.concatenate(prompts, axis=0)
    return [model.score(states, c) for c in candidates]
