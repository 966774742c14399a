"""Independent NumPy reference for structured prompting (docs/structured_prompting.md).

Written from the spec page and DESIGN.md §1 only, not from manyshot's C++. It deliberately does
NOT use the engine's strategy (per-group KV caches merged with a log-sum-exp): every score is one
full-sequence float64 forward pass over

    [group_1: bos, slots..] [group_2: bos, slots..] .. [query bos, q_1..q_T, answer tokens..]

with explicit position ids and an explicit additive attention bias matrix (0 = attended with
weight 1, ln f = attended with weight f, -inf = not attended), then a plain softmax. So the C++
merge is checked against the definition, not against another merge.

Pieces:
  splitmix64_order       the demonstration order for a shuffle seed
  build_groups           long-demonstration policy, alignment, slots, demonstrations per group
  conventional_window    the CONVENTIONAL mode's single window
  Scorer                 candidate log-probs, greedy and beam-search generation for one layout

Run with /usr/bin/python3 (numpy 1.24); depends only on reference.py next to it.
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import beam_search  # noqa: E402
import reference  # noqa: E402

MASK64 = (1 << 64) - 1
MASKED = -1  # a masked slot in a group's slot list

ALIGNMENTS = ("TRUNCATE", "ATTENTION_MASK", "PAD_SPACE")
LONG_POLICIES = ("REJECT", "TRUNCATE")
MODES = ("STRUCTURED", "PARALLEL", "CONVENTIONAL")


class SpecError(ValueError):
    """What the engine must reject (task creation / request validation)."""


# ------------------------------------------------------------------------------------------------
# Order
# ------------------------------------------------------------------------------------------------

class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def splitmix64_order(n, seed):
    """Indices (into the given order) of the demonstrations in the order they are packed."""
    order = list(range(n))
    if seed == 0:
        return order
    rng = SplitMix64(seed)
    for i in range(n - 1, 0, -1):
        j = rng.next() % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


# ------------------------------------------------------------------------------------------------
# Groups
# ------------------------------------------------------------------------------------------------

def apply_long_policy(demos, c, policy):
    """demos in GIVEN order -> demos with the long-demonstration policy applied."""
    if policy not in LONG_POLICIES:
        raise SpecError(f"unknown long_demonstrations policy {policy}")
    out = []
    for i, d in enumerate(demos):
        if len(d) > c:
            if policy == "REJECT":
                raise SpecError(f"demonstration {i} has {len(d)} tokens, more than the "
                                f"{c} content tokens of a group")
            d = d[len(d) - c:]  # keep the last C tokens (the answer survives)
        out.append(list(d))
    return out


def build_groups(demos, group_length, alignment, shuffle_seed, long_policy, space_id):
    """Packs tokenized demonstrations (given order) into groups.

    Returns dict(order=[given indices in packing order],
                 groups=[dict(slots=[C ids, MASKED for a masked slot],
                              owners=[C given-order demo index or None for pads],
                              demonstrations=count)]).
    """
    L = group_length
    if L < 2:
        raise SpecError("group length must be >= 2")
    if alignment not in ALIGNMENTS:
        raise SpecError(f"unknown alignment {alignment}")
    c = L - 1
    demos = apply_long_policy(demos, c, long_policy)
    order = splitmix64_order(len(demos), shuffle_seed)

    # Each running list holds (token, owner) pairs.
    closed = []
    g = []
    if alignment == "TRUNCATE":
        for idx in order:
            g.extend((t, idx) for t in demos[idx])
            if len(g) == c:
                closed.append(g)
                g = []
            elif len(g) > c:
                closed.append(g[len(g) - c:])
                g = []
        if g:
            closed.append(g)  # len < C: padded (masked) below
        pad_token = MASKED
    else:
        for idx in order:
            d = [(t, idx) for t in demos[idx]]
            if len(g) + len(d) <= c:
                g.extend(d)
            else:
                if g:
                    closed.append(g)
                g = d
        if g:
            closed.append(g)
        pad_token = MASKED if alignment == "ATTENTION_MASK" else space_id

    groups = []
    for g in closed:
        assert len(g) <= c
        pad = c - len(g)
        slots = [pad_token] * pad + [t for t, _ in g]
        owners = [None] * pad + [o for _, o in g]
        assert len(slots) == c, "every group has exactly C slots"
        groups.append(dict(slots=slots, owners=owners,
                           demonstrations=len({o for o in owners if o is not None})))
    return dict(order=order, groups=groups)


def conventional_window(demos, group_length, shuffle_seed, long_policy):
    """CONVENTIONAL: whole demonstrations in (shuffled) order while the content stays <= C."""
    c = group_length - 1
    demos = apply_long_policy(demos, c, long_policy)
    window = []
    for idx in splitmix64_order(len(demos), shuffle_seed):
        if len(window) + len(demos[idx]) > c:
            break
        window.extend(demos[idx])
    return window


def continuation(encode, query_text, answer_text):
    """Candidate tokenization as a continuation (lm-evaluation-harness style)."""
    j = encode(query_text + answer_text)
    q = encode(query_text)
    if len(j) > len(q) and j[:len(q)] == q:
        out = j[len(q):]
    else:
        out = encode(answer_text)
    if not out:
        raise SpecError(f"empty continuation for answer {answer_text!r}")
    return out


# ------------------------------------------------------------------------------------------------
# Forward pass with an explicit attention bias
# ------------------------------------------------------------------------------------------------

def _attend(q, k, v, bias):
    """q: [T, nh, d]; k, v: [T, nkv, d]; bias: [T, T] additive (-inf = not attended)."""
    t, nh, d = q.shape
    rep = nh // k.shape[1]
    k = np.repeat(k, rep, axis=1)  # HF repeat_kv: query head h uses kv head h // rep
    v = np.repeat(v, rep, axis=1)
    scores = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(d) + bias[None]
    probs = reference.softmax(scores, axis=-1)
    return np.einsum("hij,jhd->ihd", probs, v).reshape(t, nh * d)


def final_hidden(model, tokens, positions, bias):
    """Final-norm hidden states [T, hidden] of model for an arbitrary attention bias."""
    t = len(tokens)
    tokens = np.asarray(tokens)
    positions = np.asarray(positions)
    if hasattr(model, "final_hidden"):  # BLOOM, OPT
        return model.final_hidden(tokens, positions, bias)
    if isinstance(model, reference.LlamaModel):
        h = model.w["model.embed_tokens.weight"][tokens]
        for i in range(model.layers):
            p = f"model.layers.{i}."
            x = model.rms_norm(h, model.w[p + "input_layernorm.weight"])
            q = model.linear(x, p + "self_attn.q_proj").reshape(t, model.nh, model.hd)
            k = model.linear(x, p + "self_attn.k_proj").reshape(t, model.nkv, model.hd)
            v = model.linear(x, p + "self_attn.v_proj").reshape(t, model.nkv, model.hd)
            q = model.rope(q, positions)
            k = model.rope(k, positions)
            h = h + model.linear(_attend(q, k, v, bias), p + "self_attn.o_proj")
            x = model.rms_norm(h, model.w[p + "post_attention_layernorm.weight"])
            gate = model.linear(x, p + "mlp.gate_proj")
            up = model.linear(x, p + "mlp.up_proj")
            h = h + model.linear(gate / (1.0 + np.exp(-gate)) * up, p + "mlp.down_proj")
        return model.rms_norm(h, model.w["model.norm.weight"])
    if isinstance(model, reference.Gpt2Model):
        if positions.min() < 0 or positions.max() >= model.n_positions:
            raise ValueError("position out of range for wpe")
        h = model.w["wte.weight"][tokens] + model.w["wpe.weight"][positions]
        shape = (t, model.nh, model.hd)
        for i in range(model.layers):
            p = f"h.{i}."
            x = model.layer_norm(h, p + "ln_1")
            q, k, v = np.split(model.conv1d(x, p + "attn.c_attn"), 3, axis=-1)
            attn = _attend(q.reshape(shape), k.reshape(shape), v.reshape(shape), bias)
            h = h + model.conv1d(attn, p + "attn.c_proj")
            x = model.layer_norm(h, p + "ln_2")
            h = h + model.conv1d(model.gelu_new(model.conv1d(x, p + "mlp.c_fc")),
                                 p + "mlp.c_proj")
        return model.layer_norm(h, "ln_f")
    raise NotImplementedError(type(model).__name__)


def lm_head(model):
    if hasattr(model, "lm_head"):  # Llama, BLOOM, OPT
        return model.lm_head
    return model.w["wte.weight"]


def log_softmax(x):
    m = np.max(x)
    return x - (m + np.log(np.sum(np.exp(x - m))))


# ------------------------------------------------------------------------------------------------
# Layouts: the prefix (groups or window) plus the query side
# ------------------------------------------------------------------------------------------------

class Layout:
    """Tokens, positions and attention bias of [context][query side] for one mode.

    The context part (groups, or the conventional window) is fixed; `sequence(query_side)` appends
    the query-side tokens (query tokens followed by answer/generated tokens).
    """

    def __init__(self, mode, bos, group_length, groups=None, window=None, rescale_factor=None):
        if mode not in MODES:
            raise SpecError(f"unknown mode {mode}")
        self.mode = mode
        self.bos = bos
        self.L = group_length
        ctx_tokens, ctx_pos, ctx_group = [], [], []
        if mode == "CONVENTIONAL":
            ctx_tokens = [bos] + list(window)
            ctx_pos = list(range(len(ctx_tokens)))
            ctx_group = [0] * len(ctx_tokens)
            self.factor = 1.0
        else:
            m = len(groups)
            if m == 0:
                raise SpecError("no groups")
            if rescale_factor is not None:
                self.factor = float(rescale_factor)
            elif mode == "STRUCTURED":
                self.factor = float(m)
            else:
                self.factor = 1.0
            for gi, g in enumerate(groups):
                ctx_tokens.append(bos)
                ctx_pos.append(0)
                ctx_group.append(gi)
                for s, tok in enumerate(g["slots"], start=1):
                    if tok == MASKED:
                        continue  # not a token at all
                    ctx_tokens.append(tok)
                    ctx_pos.append(s)
                    ctx_group.append(gi)
        self.ctx_tokens = ctx_tokens
        self.ctx_pos = ctx_pos
        self.ctx_group = ctx_group

    def sequence(self, query_side):
        """(tokens, positions, bias, index of the first query-side token)."""
        n_ctx = len(self.ctx_tokens)
        if self.mode == "CONVENTIONAL":
            tokens = self.ctx_tokens + list(query_side)
            positions = list(range(len(tokens)))
            n = len(tokens)
            bias = np.where(np.tril(np.ones((n, n), dtype=bool)), 0.0, -np.inf)
            return tokens, positions, bias, n_ctx
        qs = list(query_side)
        tokens = self.ctx_tokens + [self.bos] + qs
        positions = self.ctx_pos + [0] + [self.L + i for i in range(len(qs))]
        n = len(tokens)
        bias = np.full((n, n), -np.inf)
        group = np.asarray(self.ctx_group)
        is_bos = np.asarray([p == 0 for p in self.ctx_pos])
        for i in range(n_ctx):
            for j in range(i + 1):  # causal within its own group (indices follow positions)
                if group[j] == group[i]:
                    bias[i, j] = 0.0
        qb = n_ctx  # the query's bos attends only to itself
        bias[qb, qb] = 0.0
        log_f = math.log(self.factor)
        for i in range(qb + 1, n):
            bias[i, :n_ctx] = np.where(is_bos, -np.inf, 0.0)  # every non-bos context token
            bias[i, qb] = 0.0                                    # its own bos, weight 1
            bias[i, qb + 1:i + 1] = log_f                        # its own tokens 1..t, weight f
        return tokens, positions, bias, qb + 1


class Scorer:
    def __init__(self, model, layout):
        self.model = model
        self.layout = layout
        self.head = lm_head(model)

    def next_logprobs(self, query_side, rows):
        """Log-probabilities of the next token after query_side[r] for each r in rows."""
        tokens, positions, bias, first = self.layout.sequence(query_side)
        h = final_hidden(self.model, tokens, positions, bias)
        out = []
        for r in rows:
            if hasattr(self.model, "logits"):  # Gemma: the lm head with Gemma 2's soft-cap
                logits = self.model.logits(h[first + r])
            else:
                logits = h[first + r] @ self.head.T
            out.append(log_softmax(logits))
        return out

    def score_candidates(self, query, candidates):
        """Returns (sum_logprob, mean_logprob, probability) lists, one entry per candidate."""
        if not query:
            raise SpecError("empty query")
        sums, means = [], []
        for cand in candidates:
            if not cand:
                raise SpecError("empty candidate")
            rows = [len(query) - 1 + k for k in range(len(cand))]
            lps = self.next_logprobs(list(query) + list(cand), rows)
            s = float(sum(lp[tok] for lp, tok in zip(lps, cand)))
            sums.append(s)
            means.append(s / len(cand))
        m = np.asarray(means)
        e = np.exp(m - m.max())
        probs = [float(x) for x in e / e.sum()]
        return sums, means, probs

    def greedy(self, query, max_new_tokens, eos_id, length_penalty):
        """Greedy decoding. Returns dict(tokens (without eos), sum_logprob, score, finish).

        sum_logprob includes the eos token's log-prob when generation stopped at eos, and the
        score's length counts it (the same convention as a finished beam hypothesis)."""
        gen, total = [], 0.0
        finish = "MAX_TOKENS"
        for _ in range(max_new_tokens):
            (lp,) = self.next_logprobs(list(query) + gen, [len(query) + len(gen) - 1])
            tok = int(np.argmax(lp))  # first maximum = lowest id on ties
            total += float(lp[tok])
            if tok == eos_id:
                finish = "EOS"
                length = len(gen) + 1
                break
            gen.append(tok)
        else:
            length = len(gen)
        return dict(tokens=gen, sum_logprob=total, score=total / length ** length_penalty,
                    finish=finish)

    def beam(self, query, beam_width, length_penalty, max_new_tokens, eos_id):
        """Beam search exactly as docs/structured_prompting.md § Generation (beam_search.py)."""
        return beam_search.beam_search(
            lambda toks: self.next_logprobs(list(query) + toks, [len(query) + len(toks) - 1])[0],
            beam_width, length_penalty, max_new_tokens, eos_id)
