#!/usr/bin/env python3
"""The PyTorch peer of `manyshot-bench attention`: the same query batches, done the obvious way.

Builds a random-weight model of the same shape in torch bf16 (embeddings, norms, qkv, attention,
MLP, final norm, lm head on the last row only) and a random bf16 context K/V of N tokens per layer,
then runs batches of B queries of R tokens, structured prompting's attention written plainly: per
layer, K/V = concat(context K/V, own K/V) and torch.nn.functional.scaled_dot_product_attention
with an additive mask (the bos row does not see the context, own rows are causal, own non-bos keys
get +ln M, M = ceil(N / 1024) groups). Prints queries/s: the median over timed runs, each ending
with the logits on the host (as the C++ side copies them) and torch.cuda.synchronize().

usage: torch_peer.py --shape gpt2|llama1b --context_tokens N --batch 1,32 --rows 20 [--json]
With --json the last line printed is one JSON object ({"error": ...} when torch is unusable).
"""
import argparse
import json
import math
import statistics
import sys
import time

SHAPES = {
    # layers, hidden, heads, kv_heads, intermediate, vocab, first position of non-bos tokens
    "gpt2": dict(layers=12, hidden=768, heads=12, kv_heads=12, inter=3072, vocab=50257, first=1000,
                 max_pos=1024),
    "llama1b": dict(layers=16, hidden=2048, heads=32, kv_heads=8, inter=8192, vocab=32000,
                    first=1024, max_pos=4096),
}


def fail(args, message):
    if args.json:
        print(json.dumps({"error": message}))
    else:
        print("torch_peer: " + message, file=sys.stderr)
    sys.exit(0 if args.json else 1)  # --json: the caller reads the reason from the JSON


def build(torch, shape, n_ctx, device, dtype):
    """Random weights (std 1/sqrt(fan_in)) and context K/V [1, kv_heads, N, 64] per layer."""
    s = SHAPES[shape]
    H, I, V, D = s["hidden"], s["inter"], s["vocab"], s["hidden"] // s["heads"]
    q_out, kv_out = s["heads"] * D, s["kv_heads"] * D
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*size, std=1.0):
        return (torch.randn(*size, generator=g, device=device, dtype=torch.float32) * std).to(dtype)

    m = {"cfg": s, "D": D, "embed": rand(V, H, std=0.02), "layers": []}
    if shape == "gpt2":
        m["wpe"] = rand(s["max_pos"], H, std=0.01)
    for _ in range(s["layers"]):
        layer = {
            "qkv": rand(q_out + 2 * kv_out, H, std=H ** -0.5),
            "o": rand(H, q_out, std=q_out ** -0.5),
            "norm1": torch.ones(H, device=device, dtype=dtype),
            "norm2": torch.ones(H, device=device, dtype=dtype),
            # Context K/V, pre-transposed to SDPA's [batch, heads, len, dim] once at set-up.
            "ctx_k": rand(n_ctx, s["kv_heads"], D).transpose(0, 1).unsqueeze(0).contiguous(),
            "ctx_v": rand(n_ctx, s["kv_heads"], D).transpose(0, 1).unsqueeze(0).contiguous(),
        }
        if shape == "gpt2":
            layer.update(qkv_b=rand(q_out + 2 * kv_out, std=0.01), o_b=rand(H, std=0.01),
                         norm1_b=torch.zeros(H, device=device, dtype=dtype),
                         norm2_b=torch.zeros(H, device=device, dtype=dtype),
                         up=rand(I, H, std=H ** -0.5), up_b=rand(I, std=0.01),
                         down=rand(H, I, std=I ** -0.5), down_b=rand(H, std=0.01))
        else:
            layer.update(gate_up=rand(2 * I, H, std=H ** -0.5), down=rand(H, I, std=I ** -0.5))
        m["layers"].append(layer)
    m["norm_f"] = torch.ones(H, device=device, dtype=dtype)
    m["norm_f_b"] = torch.zeros(H, device=device, dtype=dtype)
    return m


def attend(F, q, K, V, mask):
    """softmax(q K^T / sqrt(D) + mask) V (SDPA's default scale is 1/sqrt(D))."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, K, V, attn_mask=mask)
    # torch < 2.0 has no SDPA: the same math spelled out (only for checking this script).
    s = (q @ K.transpose(-1, -2)).float() * q.shape[-1] ** -0.5 + mask.float()
    return s.softmax(-1).to(q.dtype) @ V


def forward(torch, F, m, shape, ids, pos, mask):
    """Logits [B, vocab] of the last row of each query."""
    s, D = m["cfg"], m["D"]
    B, R = ids.shape
    heads, kv_heads = s["heads"], s["kv_heads"]
    gpt2 = shape == "gpt2"
    x = F.embedding(ids, m["embed"])
    if gpt2:
        x = x + F.embedding(pos, m["wpe"])[None]
    else:
        inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=ids.device, dtype=torch.float32) / D))
        ang = pos.float()[:, None] * inv[None]
        cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)[None, None]
        sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)[None, None]

        def rope(t):
            t1, t2 = t[..., : D // 2], t[..., D // 2:]
            return t * cos + torch.cat([-t2, t1], -1) * sin

    def norm(t, w, b):
        if gpt2:
            return F.layer_norm(t, (t.shape[-1],), w, b, 1e-5)
        return F.rms_norm(t, (t.shape[-1],), w, 1e-5) if hasattr(F, "rms_norm") else (
            t * torch.rsqrt(t.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(t.dtype) * w)

    for L in m["layers"]:
        h = norm(x, L["norm1"], L.get("norm1_b"))
        qkv = F.linear(h, L["qkv"], L.get("qkv_b"))
        q, k, v = qkv.split([heads * D, kv_heads * D, kv_heads * D], -1)
        q = q.view(B, R, heads, D).transpose(1, 2)
        k = k.view(B, R, kv_heads, D).transpose(1, 2)
        v = v.view(B, R, kv_heads, D).transpose(1, 2)
        if not gpt2:
            q, k = rope(q), rope(k)
        # The obvious way: every query gets its own copy of the context in front of its keys.
        K = torch.cat([L["ctx_k"].expand(B, -1, -1, -1), k], 2)
        V = torch.cat([L["ctx_v"].expand(B, -1, -1, -1), v], 2)
        if kv_heads != heads:  # Hugging Face's repeat_kv
            K = K.repeat_interleave(heads // kv_heads, 1)
            V = V.repeat_interleave(heads // kv_heads, 1)
        a = attend(F, q, K, V, mask)
        x = x + F.linear(a.transpose(1, 2).reshape(B, R, heads * D), L["o"], L.get("o_b"))
        h = norm(x, L["norm2"], L.get("norm2_b"))
        if gpt2:
            h = F.gelu(F.linear(h, L["up"], L["up_b"]), approximate="tanh")
            x = x + F.linear(h, L["down"], L["down_b"])
        else:
            gate, up = F.linear(h, L["gate_up"]).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, L["down"])
    last = norm(x[:, -1], m["norm_f"], m["norm_f_b"])
    return F.linear(last, m["embed"]).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--context_tokens", type=int, default=30569)
    ap.add_argument("--batch", default="1,32", help="batch sizes, comma-separated")
    ap.add_argument("--rows", type=int, default=20, help="tokens per query, bos included")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means no peer
        fail(args, "torch unavailable: %s: %s" % (type(e).__name__, e))
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        fail(args, "torch %s sees no CUDA device" % torch.__version__)
    device = torch.device(args.device)
    dtype = torch.bfloat16
    s = SHAPES[args.shape]
    N, R = args.context_tokens, args.rows
    M = math.ceil(N / 1024)
    batches = [int(b) for b in args.batch.split(",") if b]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with torch.inference_mode():
        m = build(torch, args.shape, N, device, dtype)
        # bos at position 0, then the first position onwards (structured placement).
        pos = torch.tensor([0] + [s["first"] + t for t in range(R - 1)], device=device)
        # Additive mask [1, 1, R, N + R], padded to a multiple of 8 columns so that the slice has
        # the aligned stride the memory-efficient SDPA kernel wants.
        cols = N + R
        mask_full = torch.zeros(1, 1, R, (cols + 7) // 8 * 8, device=device, dtype=dtype)
        mask = mask_full[..., :cols]
        mask[..., 0, :N] = float("-inf")  # the bos row does not see the context
        own = torch.arange(R, device=device)
        causal = own[None, :] > own[:, None]
        own_bias = torch.full((R, R), math.log(M), device=device, dtype=dtype)
        own_bias[:, 0] = 0.0  # bos keeps weight 1
        own_bias[causal] = float("-inf")
        mask[0, 0, :, N:] = own_bias
        g = torch.Generator(device=device).manual_seed(1)
        results = []
        for B in batches:
            ids = torch.randint(0, s["vocab"], (B, R), generator=g, device=device)
            for _ in range(args.warmup):
                forward(torch, F, m, args.shape, ids, pos, mask).cpu()
            sync()
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                logits = forward(torch, F, m, args.shape, ids, pos, mask).cpu()
                sync()
                times.append(time.perf_counter() - t0)
            assert logits.shape == (B, s["vocab"])
            sec = statistics.median(times)
            results.append({"batch": B, "ms_per_batch": sec * 1e3, "queries_per_second": B / sec})
    out = {
        "shape": args.shape, "context_tokens": N, "rows": R, "groups": M, "runs": args.runs,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "attention": "concat(context, own) + %s(additive mask)" % (
            "scaled_dot_product_attention" if hasattr(F, "scaled_dot_product_attention")
            else "explicit softmax"),
        "results": results,
    }
    if args.json:
        print(json.dumps(out))
    else:
        for r in results:
            print("%s batch %d: %.3f ms/batch, %.1f queries/s" % (
                args.shape, r["batch"], r["ms_per_batch"], r["queries_per_second"]))


if __name__ == "__main__":
    main()
