"""Independent NumPy reference for T5 (encoder-decoder), from the Hugging Face semantics.

Written from transformers' modeling_t5.py (T5ForConditionalGeneration), not from manyshot's C++,
so the goldens it produces check the engine independently:

- T5LayerNorm: x / sqrt(mean(x^2) + eps) * w (no mean subtraction, no bias).
- Attention: softmax(q k^T + position_bias + mask) v, with NO 1/sqrt(d_kv) scaling.
- Relative position bias: _relative_position_bucket(key - query), bidirectional in the encoder,
  unidirectional in the decoder; the table of block 0 serves every block of its stack. The bucket
  arithmetic is float32, as torch does it on a float tensor, so bucket edges match transformers.
- Cross-attention: decoder queries against the encoder output's keys/values, no position bias.
- Feed-forward: "relu" wo(relu(wi x)); "gated-gelu" wo(gelu_new(wi_0 x) * wi_1 x).
- Logits: lm_head(decoder_out), with decoder_out * d_model^-0.5 first when the embeddings are tied
  (then lm_head is shared.weight).

Everything else is float64 from the stored weights (read by reference.read_safetensors_dir).
Run with /usr/bin/python3 (numpy); no other dependencies.
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import beam_search  # noqa: E402
import reference  # noqa: E402  (safetensors reading, softmax)


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """transformers' T5Attention._relative_position_bucket on an int array (float32 log part)."""
    relative_position = np.asarray(relative_position, dtype=np.int64)
    buckets = np.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).astype(np.int64) * num_buckets
        relative_position = np.abs(relative_position)
    else:
        relative_position = -np.minimum(relative_position, 0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    with np.errstate(divide="ignore"):
        ratio = relative_position.astype(np.float32) / np.float32(max_exact)
        large = np.log(ratio) / np.float32(math.log(max_distance / max_exact))
        large = large * np.float32(num_buckets - max_exact)
    # .to(torch.long) truncates toward zero; small distances (log of < 1, even -inf) are unused.
    large = max_exact + np.trunc(np.where(is_small, 0, large)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(is_small, relative_position, large)


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class T5Model:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = json.load(f)
        self.c = c
        self.w = reference.read_safetensors_dir(model_dir)
        self.d_model = c["d_model"]
        self.heads = c["num_heads"]
        self.d_kv = c["d_kv"]
        self.layers = c["num_layers"]
        self.decoder_layers = c.get("num_decoder_layers") or self.layers
        self.buckets = c.get("relative_attention_num_buckets", 32)
        self.max_distance = c.get("relative_attention_max_distance", 128)
        self.eps = float(c.get("layer_norm_epsilon", 1e-6))
        self.ff = c.get("feed_forward_proj", "relu")
        if self.ff not in ("relu", "gated-gelu"):
            raise NotImplementedError(self.ff)
        self.tied = c.get("tie_word_embeddings", True)
        self.shared = self.w["shared.weight"]
        self.lm_head = self.shared if self.tied else self.w["lm_head.weight"]

    def norm(self, x, name):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * self.w[name]

    def lin(self, x, name):
        return x @ self.w[name + ".weight"].T

    def position_bias(self, stack, q_len, k_len, q_offset, bidirectional):
        """[heads, q_len, k_len] for queries at q_offset.. and keys at 0.. (T5 compute_bias)."""
        context = np.arange(q_offset, q_offset + q_len)[:, None]
        memory = np.arange(k_len)[None, :]
        buckets = relative_position_bucket(memory - context, bidirectional, self.buckets,
                                           self.max_distance)
        table = self.w[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
        return np.transpose(table[buckets], (2, 0, 1))

    def attention(self, x_q, x_kv, prefix, bias):
        """x_q [Tq, d], x_kv [Tk, d]; bias [heads, Tq, Tk] or None. Returns [Tq, d]."""
        h, dk = self.heads, self.d_kv
        q = self.lin(x_q, prefix + ".q").reshape(-1, h, dk)
        k = self.lin(x_kv, prefix + ".k").reshape(-1, h, dk)
        v = self.lin(x_kv, prefix + ".v").reshape(-1, h, dk)
        scores = np.einsum("ihd,jhd->hij", q, k)  # T5: no 1/sqrt(d_kv)
        if bias is not None:
            scores = scores + bias
        probs = reference.softmax(scores, axis=-1)
        out = np.einsum("hij,jhd->ihd", probs, v).reshape(-1, h * dk)
        return self.lin(out, prefix + ".o")

    def feed_forward(self, x, prefix):
        if self.ff == "relu":
            hidden = np.maximum(self.lin(x, prefix + ".wi"), 0.0)
        else:
            hidden = gelu_new(self.lin(x, prefix + ".wi_0")) * self.lin(x, prefix + ".wi_1")
        return self.lin(hidden, prefix + ".wo")

    def encode(self, ids):
        """Encoder states [T, d_model] after the final layer norm."""
        x = self.shared[np.asarray(ids)]
        n = len(ids)
        bias = self.position_bias("encoder", n, n, 0, bidirectional=True)
        for b in range(self.layers):
            p = f"encoder.block.{b}"
            x = x + self.attention(self.norm(x, p + ".layer.0.layer_norm.weight"),
                                   self.norm(x, p + ".layer.0.layer_norm.weight"),
                                   p + ".layer.0.SelfAttention", bias)
            x = x + self.feed_forward(self.norm(x, p + ".layer.1.layer_norm.weight"),
                                      p + ".layer.1.DenseReluDense")
        return self.norm(x, "encoder.final_layer_norm.weight")

    def decode(self, states, ids):
        """Teacher-forced decoder over `ids` (the first is decoder_start_token_id): logits [T, V]."""
        x = self.shared[np.asarray(ids)]
        n = len(ids)
        bias = self.position_bias("decoder", n, n, 0, bidirectional=False)
        causal = np.tril(np.ones((n, n), dtype=bool))
        bias = np.where(causal[None], bias, -np.inf)
        for b in range(self.decoder_layers):
            p = f"decoder.block.{b}"
            h = self.norm(x, p + ".layer.0.layer_norm.weight")
            x = x + self.attention(h, h, p + ".layer.0.SelfAttention", bias)
            h = self.norm(x, p + ".layer.1.layer_norm.weight")
            x = x + self.attention(h, states, p + ".layer.1.EncDecAttention", None)
            x = x + self.feed_forward(self.norm(x, p + ".layer.2.layer_norm.weight"),
                                      p + ".layer.2.DenseReluDense")
        out = self.norm(x, "decoder.final_layer_norm.weight")
        if self.tied:
            out = out * self.d_model ** -0.5
        return out @ self.lm_head.T

    def score(self, states, candidate):
        """Sum and mean of log p(candidate token | input, prefix): the decoder reads
        decoder_start_token_id then the candidate but its last token."""
        start = self.c.get("decoder_start_token_id", 0)
        logits = self.decode(states, [start] + list(candidate[:-1]))
        top = logits.max(axis=-1, keepdims=True)
        log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
        total = float(sum(log_probs[i, t] for i, t in enumerate(candidate)))
        return total, total / len(candidate)

    def greedy(self, states, max_new_tokens):
        """Greedy decoding: (tokens without start and eos, ended_with_eos, smallest top-2 margin)."""
        start = self.c.get("decoder_start_token_id", 0)
        eos = self.c.get("eos_token_id", 1)
        seq, margin = [start], np.inf
        for _ in range(max_new_tokens):
            row = self.decode(states, seq)[-1]
            top2 = np.sort(row)[-2:]
            margin = min(margin, float(top2[1] - top2[0]))
            token = int(row.argmax())
            if token == eos:
                return seq[1:], True, margin
            seq.append(token)
        return seq[1:], False, margin

    def next_logprobs(self, states, generated):
        """log p(next token | input, generated): the decoder reads decoder_start_token_id then
        `generated` (natural log, [V])."""
        start = self.c.get("decoder_start_token_id", 0)
        row = self.decode(states, [start] + list(generated))[-1]
        top = row.max()
        return row - top - np.log(np.exp(row - top).sum())

    def beam(self, states, beam_width, length_penalty, max_new_tokens, eos_id):
        """Beam search from the decoder with the decoder-only semantics (beam_search.py)."""
        return beam_search.beam_search(lambda toks: self.next_logprobs(states, toks), beam_width,
                                       length_penalty, max_new_tokens, eos_id)
