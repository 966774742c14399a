"""NumPy reference for Gemma and Gemma 2, from Hugging Face's modeling_gemma.py and
modeling_gemma2.py (not from manyshot's C++). float64 throughout, as reference.py.

What differs from Llama (reference.LlamaModel):
  - the embeddings are multiplied by sqrt(hidden_size) as a tensor of the activations' dtype
    (GemmaModel.forward's `normalizer`); the reference rounds it to float32, the dtype the engine's
    CPU computes in;
  - RMSNorm multiplies by (1 + w) (GemmaRMSNorm);
  - the MLP is down(gelu_pytorch_tanh(gate(x)) * up(x));
  - head_dim comes from the config, and the lm head is tied to the embeddings.
Gemma 2 adds:
  - q.k scaled by query_pre_attn_scalar^-0.5 instead of head_dim^-0.5;
  - attention logits soft-capped before the mask: cap * tanh(logit / cap)
    (attn_logit_softcapping), and the lm head's logits likewise (final_logit_softcapping);
  - post_attention_layernorm on the attention's output and post_feedforward_layernorm on the MLP's,
    both before the residual add, with pre_feedforward_layernorm as the MLP's input norm;
  - a sliding window on even layers: the reference refuses positions at or past it (within the
    window, which is where the engine serves Gemma 2, it hides no key).
"""

import numpy as np

import reference


class GemmaModel(reference.LlamaModel):
    def __init__(self, config, tensors):
        super().__init__(config, tensors)
        self.gemma2 = config["model_type"] == "gemma2"
        self.hd = config.get("head_dim") or 256  # GemmaConfig's default
        act = config.get("hidden_activation") or "gelu_pytorch_tanh"
        if act not in ("gelu_pytorch_tanh", "gelu_new"):
            raise NotImplementedError(act)
        self.lm_head = tensors["model.embed_tokens.weight"]
        self.normalizer = float(np.float32(np.sqrt(self.hidden)))
        self.scaling = 1.0 / np.sqrt(self.hd)
        self.attn_cap = None
        self.final_logit_softcap = None
        self.window = None
        if self.gemma2:
            self.scaling = float(config.get("query_pre_attn_scalar", 256)) ** -0.5
            self.attn_cap = config.get("attn_logit_softcapping", 50.0)
            self.final_logit_softcap = config.get("final_logit_softcapping", 30.0)
            self.window = config.get("sliding_window", 4096)

    def rms_norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * (1.0 + w)

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))

    def attend(self, q, k, v, bias):
        """q: [T, nh, d]; k, v: [T, nkv, d]; bias [T, T] additive after the soft-cap."""
        t = q.shape[0]
        rep = self.nh // self.nkv
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        scores = np.einsum("ihd,jhd->hij", q, k) * self.scaling
        if self.attn_cap:
            scores = self.attn_cap * np.tanh(scores / self.attn_cap)
        probs = reference.softmax(scores + bias[None], axis=-1)
        return np.einsum("hij,jhd->ihd", probs, v).reshape(t, self.nh * self.hd), probs

    def final_hidden(self, tokens, positions, bias, probs_out=None):
        t = len(tokens)
        positions = np.asarray(positions)
        if self.window and positions.max() >= self.window:
            raise ValueError("position past Gemma 2's sliding window")
        h = self.w["model.embed_tokens.weight"][np.asarray(tokens)] * self.normalizer
        for i in range(self.layers):
            p = f"model.layers.{i}."
            x = self.rms_norm(h, self.w[p + "input_layernorm.weight"])
            q = self.rope(self.linear(x, p + "self_attn.q_proj").reshape(t, self.nh, self.hd),
                          positions)
            k = self.rope(self.linear(x, p + "self_attn.k_proj").reshape(t, self.nkv, self.hd),
                          positions)
            v = self.linear(x, p + "self_attn.v_proj").reshape(t, self.nkv, self.hd)
            attn, probs = self.attend(q, k, v, bias)
            if probs_out is not None:
                probs_out.append(probs)
            attn = self.linear(attn, p + "self_attn.o_proj")
            if self.gemma2:
                attn = self.rms_norm(attn, self.w[p + "post_attention_layernorm.weight"])
                h = h + attn
                x = self.rms_norm(h, self.w[p + "pre_feedforward_layernorm.weight"])
            else:
                h = h + attn
                x = self.rms_norm(h, self.w[p + "post_attention_layernorm.weight"])
            gate = self.linear(x, p + "mlp.gate_proj")
            up = self.linear(x, p + "mlp.up_proj")
            mlp = self.linear(self.gelu_tanh(gate) * up, p + "mlp.down_proj")
            if self.gemma2:
                mlp = self.rms_norm(mlp, self.w[p + "post_feedforward_layernorm.weight"])
            h = h + mlp
        return self.rms_norm(h, self.w["model.norm.weight"])

    def logits(self, h):
        out = h @ self.lm_head.T
        if self.final_logit_softcap:
            out = self.final_logit_softcap * np.tanh(out / self.final_logit_softcap)
        return out

    def forward(self, tokens, positions, return_probs=False):
        probs = []
        h = self.final_hidden(tokens, positions, reference.causal_bias(len(tokens)), probs)
        logits = self.logits(h)
        return (logits, probs) if return_probs else logits
