"""Independent NumPy reference forward pass for the model families manyshot serves.

Written from the Hugging Face modeling semantics (transformers' modeling_llama.py,
modeling_mistral.py, modeling_qwen2.py, modeling_phi3.py, modeling_gpt2.py, modeling_bloom.py,
modeling_opt.py and modeling_gpt_neox.py; Gemma and Gemma 2 in gemma_reference.py),
not from manyshot's C++, so that the
golden logits it produces are an independent check of the engine. Everything is computed in
float64 from the stored weights (f32, f16 or bf16, widened exactly).

Input is a token sequence with explicit position ids, which may be arbitrary and non-contiguous
(structured prompting places every demonstration group at positions 1..L after a shared bos at 0).
Attention is causal by index within the sequence: token j attends to tokens 0..j. Position ids
only enter through RoPE (llama family), the learned position table (GPT-2; OPT's, offset by 2) or
BLOOM's ALiBi bias (slope * key position, as HF's build_alibi_tensor; HF derives the key positions
from the attention mask, here they are the given position ids).

RoPE honours config.json rope_scaling (linear, dynamic, llama3, yarn) with the float32 tables
rope_scaling.py computes as transformers does; without it the table stays float64.

BloomModel and OptModel also expose final_hidden(tokens, positions, bias) with an explicit [T, T]
additive attention bias, which structured.py uses.

Run with /usr/bin/python3 (numpy 1.24); no other dependencies.
"""

import json
import math
import os
import struct

import numpy as np

import rope_scaling

_DTYPES = {"F32": (np.dtype("<f4"), 4), "F16": (np.dtype("<f2"), 2), "BF16": (None, 2)}


def read_safetensors_file(path):
    """Returns {name: float64 ndarray} for one .safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = memoryview(blob)[8 + header_len:]
    tensors = {}
    for name, desc in header.items():
        if name == "__metadata__":
            continue
        dtype_name = desc["dtype"]
        if dtype_name not in _DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype_name}")
        np_dtype, size = _DTYPES[dtype_name]
        begin, end = desc["data_offsets"]
        shape = tuple(desc["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * size:
            raise ValueError(f"{path}: tensor {name}: byte size mismatch")
        raw = data[begin:end]
        if dtype_name == "BF16":
            # bf16 is the top half of an f32: widen by shifting into the high 16 bits.
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        else:
            values = np.frombuffer(raw, dtype=np_dtype)
        tensors[name] = values.astype(np.float64).reshape(shape)
    return tensors


def read_safetensors_dir(model_dir):
    """Reads model.safetensors, or every shard named by model.safetensors.index.json."""
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors_file(single)
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors_file(os.path.join(model_dir, shard)))
    return tensors


def softmax(x, axis=-1):
    x = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


def causal_attention(q, k, v):
    """q: [T, nh, d]; k, v: [T, nkv, d] with nh a multiple of nkv (GQA). Returns [T, nh*d]."""
    t, nh, d = q.shape
    nkv = k.shape[1]
    rep = nh // nkv
    # HF repeat_kv: query head h uses key/value head h // rep.
    k = np.repeat(k, rep, axis=1)
    v = np.repeat(v, rep, axis=1)
    scores = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(d)
    mask = np.tril(np.ones((t, t), dtype=bool))
    scores = np.where(mask[None], scores, -np.inf)
    probs = softmax(scores, axis=-1)
    out = np.einsum("hij,jhd->ihd", probs, v)
    return out.reshape(t, nh * d), probs


class LlamaModel:
    """Llama / Mistral / Qwen2: RMSNorm, rotate-half RoPE, GQA, SwiGLU."""

    def __init__(self, config, tensors):
        self.c = config
        self.w = tensors
        self.hidden = config["hidden_size"]
        self.nh = config["num_attention_heads"]
        self.nkv = config.get("num_key_value_heads") or self.nh
        self.hd = config.get("head_dim") or self.hidden // self.nh
        self.eps = float(config["rms_norm_eps"])
        self.theta = float(config.get("rope_theta", 10000.0))
        # rope_scaling (rope_scaling.py): HF's float32 table and YaRN's factor on cos/sin.
        self.scaled_rope = rope_scaling.rope_parameters(config, self.hd)
        self.layers = config["num_hidden_layers"]
        self.lm_head = tensors.get("lm_head.weight")
        if self.lm_head is None or config.get("tie_word_embeddings", False):
            self.lm_head = tensors["model.embed_tokens.weight"]

    def rms_norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T  # HF Linear stores [out, in]
        b = self.w.get(name + ".bias")
        return y if b is None else y + b

    def rope(self, x, positions):
        """x: [T, heads, d]. Rotate-half layout: dim i pairs with dim i + d/2."""
        d = self.hd
        inv_freq = 1.0 / (self.theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
        attention = 1.0
        if self.scaled_rope is not None:
            inv_freq, attention = self.scaled_rope
        freqs = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)  # [T, d]
        cos = np.cos(emb)[:, None, :] * attention
        sin = np.sin(emb)[:, None, :] * attention
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        rotated = np.concatenate([-x2, x1], axis=-1)
        return x * cos + rotated * sin

    def forward(self, tokens, positions, return_probs=False):
        t = len(tokens)
        h = self.w["model.embed_tokens.weight"][np.asarray(tokens)]
        all_probs = []
        for i in range(self.layers):
            p = f"model.layers.{i}."
            x = self.rms_norm(h, self.w[p + "input_layernorm.weight"])
            q = self.linear(x, p + "self_attn.q_proj").reshape(t, self.nh, self.hd)
            k = self.linear(x, p + "self_attn.k_proj").reshape(t, self.nkv, self.hd)
            v = self.linear(x, p + "self_attn.v_proj").reshape(t, self.nkv, self.hd)
            q = self.rope(q, positions)
            k = self.rope(k, positions)
            attn, probs = causal_attention(q, k, v)
            all_probs.append(probs)
            h = h + self.linear(attn, p + "self_attn.o_proj")
            x = self.rms_norm(h, self.w[p + "post_attention_layernorm.weight"])
            gate = self.linear(x, p + "mlp.gate_proj")
            up = self.linear(x, p + "mlp.up_proj")
            silu = gate / (1.0 + np.exp(-gate))
            h = h + self.linear(silu * up, p + "mlp.down_proj")
        h = self.rms_norm(h, self.w["model.norm.weight"])
        logits = h @ self.lm_head.T
        return (logits, all_probs) if return_probs else logits


class Phi3Model(LlamaModel):
    """Phi-3: Llama with qkv_proj and gate_up_proj fused. Phi3Attention slices qkv_proj's output
    as q | k | v; Phi3MLP chunks gate_up_proj's in two, gate first. The fused weights are split
    here into Llama's names, and the rest is LlamaModel."""

    def __init__(self, config, tensors):
        nh = config["num_attention_heads"]
        nkv = config.get("num_key_value_heads") or nh
        hd = config.get("head_dim") or config["hidden_size"] // nh
        inter = config["intermediate_size"]
        split = dict(tensors)
        for i in range(config["num_hidden_layers"]):
            p = f"model.layers.{i}."
            qkv = split.pop(p + "self_attn.qkv_proj.weight")
            q_end, k_end = nh * hd, nh * hd + nkv * hd
            split[p + "self_attn.q_proj.weight"] = qkv[:q_end]
            split[p + "self_attn.k_proj.weight"] = qkv[q_end:k_end]
            split[p + "self_attn.v_proj.weight"] = qkv[k_end:]
            gate_up = split.pop(p + "mlp.gate_up_proj.weight")
            split[p + "mlp.gate_proj.weight"] = gate_up[:inter]
            split[p + "mlp.up_proj.weight"] = gate_up[inter:]
        super().__init__(config, split)


class Gpt2Model:
    """GPT-2: learned positions, LayerNorm, tanh-GELU, Conv1D weights stored [in, out]."""

    def __init__(self, config, tensors):
        self.c = config
        # openai-community/gpt2 has bare names; transformers-saved state dicts add "transformer.".
        self.w = {(n[len("transformer."):] if n.startswith("transformer.") else n): v
                  for n, v in tensors.items()}
        self.hidden = config["n_embd"]
        self.nh = config["n_head"]
        self.hd = self.hidden // self.nh
        self.eps = float(config.get("layer_norm_epsilon", 1e-5))
        self.layers = config["n_layer"]
        self.n_positions = config["n_positions"]
        act = config.get("activation_function", "gelu_new")
        if act != "gelu_new":
            raise NotImplementedError(act)

    def layer_norm(self, x, prefix):
        mean = np.mean(x, axis=-1, keepdims=True)
        var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)  # biased, as torch
        return (x - mean) / np.sqrt(var + self.eps) * self.w[prefix + ".weight"] + \
            self.w[prefix + ".bias"]

    def conv1d(self, x, prefix):
        return x @ self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    @staticmethod
    def gelu_new(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    def forward(self, tokens, positions, return_probs=False):
        t = len(tokens)
        positions = np.asarray(positions)
        if positions.min() < 0 or positions.max() >= self.n_positions:
            raise ValueError("position out of range for wpe")
        h = self.w["wte.weight"][np.asarray(tokens)] + self.w["wpe.weight"][positions]
        all_probs = []
        for i in range(self.layers):
            p = f"h.{i}."
            x = self.layer_norm(h, p + "ln_1")
            qkv = self.conv1d(x, p + "attn.c_attn")
            q, k, v = np.split(qkv, 3, axis=-1)
            shape = (t, self.nh, self.hd)
            attn, probs = causal_attention(q.reshape(shape), k.reshape(shape), v.reshape(shape))
            all_probs.append(probs)
            h = h + self.conv1d(attn, p + "attn.c_proj")
            x = self.layer_norm(h, p + "ln_2")
            h = h + self.conv1d(self.gelu_new(self.conv1d(x, p + "mlp.c_fc")), p + "mlp.c_proj")
        h = self.layer_norm(h, "ln_f")
        logits = h @ self.w["wte.weight"].T  # tied lm_head
        return (logits, all_probs) if return_probs else logits


def attend_with_bias(q, k, v, bias):
    """q, k, v: [T, nh, d]; bias: [nh or 1, T, T] additive (-inf = not attended)."""
    t, nh, d = q.shape
    scores = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(d) + bias
    probs = softmax(scores, axis=-1)
    return np.einsum("hij,jhd->ihd", probs, v).reshape(t, nh * d), probs


def causal_bias(t):
    return np.where(np.tril(np.ones((t, t), dtype=bool)), 0.0, -np.inf)


def layer_norm(x, w, b, eps):
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)  # biased, as torch
    return (x - mean) / np.sqrt(var + eps) * w + b


def strip_prefix(tensors, prefix):
    return {(n[len(prefix):] if n.startswith(prefix) else n): v for n, v in tensors.items()}


def alibi_slopes(num_heads):
    """HF build_alibi_tensor's slopes, including head counts that are not a power of two."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** p for p in range(1, 1 + closest)]
    if closest != num_heads:
        extra_base = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        remaining = min(closest, num_heads - closest)
        slopes += [extra_base ** p for p in range(1, 1 + 2 * remaining, 2)]
    return np.array(slopes, dtype=np.float64)


class BloomModel:
    """BLOOM: ALiBi, LayerNorm after the embeddings, fused per-head query_key_value, bloom_gelu."""

    def __init__(self, config, tensors):
        self.c = config
        # BloomModel state dicts have bare names; BloomForCausalLM's prefix "transformer.".
        self.w = strip_prefix(tensors, "transformer.")
        self.hidden = config.get("n_embed") or config["hidden_size"]
        self.nh = config["n_head"]
        self.hd = self.hidden // self.nh
        self.layers = config["n_layer"]
        self.eps = float(config.get("layer_norm_epsilon", 1e-5))
        if config.get("apply_residual_connection_post_layernorm", False):
            raise NotImplementedError("apply_residual_connection_post_layernorm")
        tied = config.get("tie_word_embeddings", True)
        self.lm_head = self.w["word_embeddings.weight"] if tied else self.w["lm_head.weight"]

    def ln(self, x, prefix):
        return layer_norm(x, self.w[prefix + ".weight"], self.w[prefix + ".bias"], self.eps)

    def linear(self, x, prefix):
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    @staticmethod
    def gelu(x):  # bloom_gelu_forward, its constants
        return x * 0.5 * (1.0 + np.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    def final_hidden(self, tokens, positions, bias, probs_out=None):
        t = len(tokens)
        h = self.ln(self.w["word_embeddings.weight"][np.asarray(tokens)],
                    "word_embeddings_layernorm")
        # alibi[h, j] = slope_h * position of key j, the same for every query row (softmax is
        # invariant to the row's own share, as HF's docstring says).
        alibi = alibi_slopes(self.nh)[:, None, None] * np.asarray(positions, np.float64)[None, None]
        for i in range(self.layers):
            p = f"h.{i}."
            x = self.ln(h, p + "input_layernorm")
            # _split_heads: [T, nh, 3 * hd], then q | k | v within each head.
            fused = self.linear(x, p + "self_attention.query_key_value").reshape(
                t, self.nh, 3, self.hd)
            q, k, v = fused[:, :, 0], fused[:, :, 1], fused[:, :, 2]
            attn, probs = attend_with_bias(q, k, v, alibi + bias[None])
            if probs_out is not None:
                probs_out.append(probs)
            h = h + self.linear(attn, p + "self_attention.dense")
            x = self.ln(h, p + "post_attention_layernorm")
            h = h + self.linear(self.gelu(self.linear(x, p + "mlp.dense_h_to_4h")),
                                p + "mlp.dense_4h_to_h")
        return self.ln(h, "ln_f")

    def forward(self, tokens, positions, return_probs=False):
        probs = []
        h = self.final_hidden(tokens, positions, causal_bias(len(tokens)), probs)
        logits = h @ self.lm_head.T
        return (logits, probs) if return_probs else logits


class OptModel:
    """OPT: learned positions at position id + 2, pre- or post-LN (do_layer_norm_before), ReLU."""

    OFFSET = 2  # OPTLearnedPositionalEmbedding

    def __init__(self, config, tensors):
        self.c = config
        # OPTForCausalLM state dicts prefix the decoder with "model."; OPTModel's do not.
        self.w = strip_prefix(tensors, "model.")
        self.hidden = config["hidden_size"]
        if config.get("word_embed_proj_dim", self.hidden) != self.hidden:
            raise NotImplementedError("word_embed_proj_dim != hidden_size")
        if config.get("activation_function", "relu") != "relu":
            raise NotImplementedError(config["activation_function"])
        self.nh = config["num_attention_heads"]
        self.hd = self.hidden // self.nh
        self.layers = config["num_hidden_layers"]
        self.pre = config.get("do_layer_norm_before", True)
        self.eps = 1e-5  # nn.LayerNorm's default; OPTConfig has no key for it
        tied = config.get("tie_word_embeddings", True)
        self.lm_head = self.w["decoder.embed_tokens.weight"] if tied else self.w["lm_head.weight"]

    def ln(self, x, prefix):
        return layer_norm(x, self.w[prefix + ".weight"], self.w[prefix + ".bias"], self.eps)

    def linear(self, x, prefix):
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    def final_hidden(self, tokens, positions, bias, probs_out=None):
        t = len(tokens)
        positions = np.asarray(positions) + self.OFFSET
        table = self.w["decoder.embed_positions.weight"]
        if positions.min() < self.OFFSET or positions.max() >= table.shape[0]:
            raise ValueError("position out of range for embed_positions")
        h = self.w["decoder.embed_tokens.weight"][np.asarray(tokens)] + table[positions]
        shape = (t, self.nh, self.hd)
        for i in range(self.layers):
            p = f"decoder.layers.{i}."
            residual = h
            x = self.ln(h, p + "self_attn_layer_norm") if self.pre else h
            q = self.linear(x, p + "self_attn.q_proj").reshape(shape)
            k = self.linear(x, p + "self_attn.k_proj").reshape(shape)
            v = self.linear(x, p + "self_attn.v_proj").reshape(shape)
            attn, probs = attend_with_bias(q, k, v, bias[None])
            if probs_out is not None:
                probs_out.append(probs)
            h = residual + self.linear(attn, p + "self_attn.out_proj")
            if not self.pre:
                h = self.ln(h, p + "self_attn_layer_norm")
            residual = h
            x = self.ln(h, p + "final_layer_norm") if self.pre else h
            x = self.linear(np.maximum(self.linear(x, p + "fc1"), 0.0), p + "fc2")
            h = residual + x
            if not self.pre:
                h = self.ln(h, p + "final_layer_norm")
        return self.ln(h, "decoder.final_layer_norm") if self.pre else h

    def forward(self, tokens, positions, return_probs=False):
        probs = []
        h = self.final_hidden(tokens, positions, causal_bias(len(tokens)), probs)
        logits = h @ self.lm_head.T
        return (logits, probs) if return_probs else logits


class GptNeoxModel:
    """GPT-NeoX / Pythia: rotary on the first rotary_ndims of each head (rotate-half within them),
    fused per-head query_key_value, LayerNorm with bias, erf GELU, parallel or sequential residual,
    untied embed_out."""

    def __init__(self, config, tensors):
        self.c = config
        self.w = tensors
        self.hidden = config["hidden_size"]
        self.nh = config["num_attention_heads"]
        self.hd = self.hidden // self.nh
        self.layers = config["num_hidden_layers"]
        self.eps = float(config.get("layer_norm_eps", 1e-5))
        pct = config.get("partial_rotary_factor", config.get("rotary_pct", 0.25))
        self.rotary_ndims = int(self.hd * pct)  # GPTNeoXAttention.rotary_ndims
        self.base = float(config.get("rope_theta", config.get("rotary_emb_base", 10000)))
        self.parallel = config.get("use_parallel_residual", True)
        if config.get("hidden_act", "gelu") != "gelu":
            raise NotImplementedError(config["hidden_act"])
        scaled = rope_scaling.rope_parameters(dict(config, rope_theta=self.base), self.rotary_ndims)
        if scaled is None:
            d = self.rotary_ndims
            scaled = (1.0 / (self.base ** (np.arange(0, d, 2, dtype=np.float64) / d)), 1.0)
        self.inv_freq, self.attention = scaled
        tied = config.get("tie_word_embeddings", False)
        self.lm_head = self.w["gpt_neox.embed_in.weight" if tied else "embed_out.weight"]

    def ln(self, x, prefix):
        return layer_norm(x, self.w[prefix + ".weight"], self.w[prefix + ".bias"], self.eps)

    def linear(self, x, prefix):
        y = x @ self.w[prefix + ".weight"].T
        b = self.w.get(prefix + ".bias")
        return y if b is None else y + b

    @staticmethod
    def gelu(x):  # torch.nn.functional.gelu, approximate="none"
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))

    def rope(self, x, positions):
        """apply_rotary_pos_emb on x[..., :rotary_ndims]; the rest passes through."""
        r = self.rotary_ndims
        freqs = np.asarray(positions, dtype=np.float64)[:, None] * self.inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos = np.cos(emb)[:, None, :] * self.attention
        sin = np.sin(emb)[:, None, :] * self.attention
        x_rot, x_pass = x[..., :r], x[..., r:]
        rotated = np.concatenate([-x_rot[..., r // 2:], x_rot[..., : r // 2]], axis=-1)
        return np.concatenate([x_rot * cos + rotated * sin, x_pass], axis=-1)

    def final_hidden(self, tokens, positions, bias, probs_out=None):
        t = len(tokens)
        h = self.w["gpt_neox.embed_in.weight"][np.asarray(tokens)]
        for i in range(self.layers):
            p = f"gpt_neox.layers.{i}."
            x = self.ln(h, p + "input_layernorm")
            # qkv.view(..., heads, 3 * head_size): q | k | v within each head.
            fused = self.linear(x, p + "attention.query_key_value").reshape(t, self.nh, 3, self.hd)
            q = self.rope(fused[:, :, 0], positions)
            k = self.rope(fused[:, :, 1], positions)
            attn, probs = attend_with_bias(q, k, fused[:, :, 2], bias[None])
            if probs_out is not None:
                probs_out.append(probs)
            attn = self.linear(attn, p + "attention.dense")
            if self.parallel:  # x + attn(ln1(x)) + mlp(ln2(x))
                mlp_in = self.ln(h, p + "post_attention_layernorm")
                h = h + attn + self.mlp(mlp_in, p)
            else:
                h = h + attn
                h = h + self.mlp(self.ln(h, p + "post_attention_layernorm"), p)
        return self.ln(h, "gpt_neox.final_layer_norm")

    def mlp(self, x, p):
        return self.linear(self.gelu(self.linear(x, p + "mlp.dense_h_to_4h")),
                           p + "mlp.dense_4h_to_h")

    def forward(self, tokens, positions, return_probs=False):
        probs = []
        h = self.final_hidden(tokens, positions, causal_bias(len(tokens)), probs)
        logits = h @ self.lm_head.T
        return (logits, probs) if return_probs else logits


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    tensors = read_safetensors_dir(model_dir)
    model_type = config["model_type"]
    if model_type in ("llama", "mistral", "qwen2"):
        return LlamaModel(config, tensors)
    if model_type == "phi3":
        return Phi3Model(config, tensors)
    if model_type == "gpt2":
        return Gpt2Model(config, tensors)
    if model_type == "bloom":
        return BloomModel(config, tensors)
    if model_type == "opt":
        return OptModel(config, tensors)
    if model_type == "gpt_neox":
        return GptNeoxModel(config, tensors)
    if model_type in ("gemma", "gemma2"):
        import gemma_reference  # noqa: E402  (it builds on LlamaModel, defined here)
        return gemma_reference.GemmaModel(config, tensors)
    raise NotImplementedError(model_type)
