"""Independent NumPy reference forward pass for the model families manyshot serves.

Written from the Hugging Face modeling semantics (transformers' modeling_llama.py,
modeling_mistral.py, modeling_qwen2.py and modeling_gpt2.py), not from manyshot's C++, so that the
golden logits it produces are an independent check of the engine. Everything is computed in
float64 from the stored weights (f32, f16 or bf16, widened exactly).

Input is a token sequence with explicit position ids, which may be arbitrary and non-contiguous
(structured prompting places every demonstration group at positions 1..L after a shared bos at 0).
Attention is causal by index within the sequence: token j attends to tokens 0..j. Position ids
only enter through RoPE (llama family) or the learned position table (GPT-2).

Run with /usr/bin/python3 (numpy 1.24); no other dependencies.
"""

import json
import os
import struct

import numpy as np

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
        if config.get("rope_scaling"):
            raise NotImplementedError("rope_scaling")
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
        freqs = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)  # [T, d]
        cos = np.cos(emb)[:, None, :]
        sin = np.sin(emb)[:, None, :]
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


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    tensors = read_safetensors_dir(model_dir)
    model_type = config["model_type"]
    if model_type in ("llama", "mistral", "qwen2"):
        return LlamaModel(config, tensors)
    if model_type == "gpt2":
        return Gpt2Model(config, tensors)
    raise NotImplementedError(model_type)
