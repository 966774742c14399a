#!/usr/bin/env python3
"""Trains the small ICL demonstration model on a GPU, evaluates it on SST-2
and exports it as a Hugging Face GPT-2 directory. Runs on the GPU machine (torch); see README.md
in this folder for the one-call device run (tools/gpu/train_icl_model.sh).

    python3 -u tools/icl_model/train.py --data_dir=tools/icl_model/work/data --out_dir=OUT

What it trains: a GPT-2-architecture decoder (GPT2LMHeadModel names and layouts, tied lm_head;
default 8 layers, n_embd 256, 4 heads of 64, 1024 positions: 19.4 M parameters, most of them the
50257 x 256 token embedding) from scratch on meta-ICL episodes (episodes.py): every episode is one
dataset with label words drawn at random per episode, so the model can only score well by reading
the word-to-class mapping off the demonstrations. SST-2 is never trained on (prepare_data.py).

Determinism: everything is seeded from --seed (torch init on the CPU generator, numpy Generators
for episodes, one per batch worker), torch.use_deterministic_algorithms(True) with
CUBLAS_WORKSPACE_CONFIG=:4096:8, and a probe that runs one backward twice and compares the
gradients bit for bit before training (falling back from SDPA to explicit attention when they
differ). --steps=auto measures the step time during warm-up (whose learning rates do not depend on
the total) and fixes the step count then; PROVENANCE.json records it, and rerunning with the
recorded --steps (same GPU type, torch/CUDA, data and --workers) repeats the run bit for bit.

Time: --max_minutes bounds the training loop (SIGTERM/SIGINT also stop it cleanly); the model is
then exported FIRST, then evaluated (--total_minutes bounds the whole run: evaluation cells that
would pass it are skipped and say so). Output in --out_dir:
  model/        config.json, model-0000i-of-0000n.safetensors (bf16), model.safetensors.index.json,
                vocab.json, merges.txt
  PROVENANCE.json  settings, steps, timings, data hash, commit, metrics, sha256 of model files

Without torch, --dry_run loads the data, builds a batch and prints the plan (what the CPU tests
run). The training loop itself has never run yet: it needs a GPU session.
"""

import argparse
import json
import math
import os
import signal
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import episodes  # noqa: E402
import export_hf  # noqa: E402
from file_hash import sha256_file  # noqa: E402
import icl_data  # noqa: E402
import sst2_eval  # noqa: E402

SENTIMENT = ("mr", "cr", "mpqa")  # held-out metric of the datasets closest to SST-2


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--data_dir", required=True, help="prepare_data.py's output folder")
    a("--out_dir", required=True)
    a("--seed", type=int, default=1)
    a("--commit", default="unknown", help="git commit of the tree (recorded in PROVENANCE.json)")
    # Model
    a("--n_layer", type=int, default=8)
    a("--n_embd", type=int, default=256)
    a("--n_head", type=int, default=4)
    a("--n_positions", type=int, default=1024)
    # Optimisation
    a("--batch_size", type=int, default=64, help="episodes of n_positions tokens per step")
    a("--steps", default="auto", help="total steps, or auto: as many as --max_minutes allows")
    a("--stop_after_steps", type=int, default=0,
      help="stop after this many steps of a --steps schedule (reproduces a run cut short)")
    a("--warmup", type=int, default=200)
    a("--lr", type=float, default=1e-3)
    a("--min_lr_ratio", type=float, default=0.1)
    a("--weight_decay", type=float, default=0.1)
    a("--beta2", type=float, default=0.95)
    a("--grad_clip", type=float, default=1.0)
    a("--lm_positions", type=int, default=64,
      help="non-label positions per episode in the loss (a language-modelling term)")
    a("--lm_weight", type=float, default=0.1)
    a("--own_template_prob", type=float, default=0.5)
    a("--weighting", default="sqrt", choices=["sqrt", "size", "uniform"])
    a("--workers", type=int, default=4, help="batch-building processes (part of the data order)")
    # Time
    a("--max_minutes", type=float, default=4.5, help="wall-clock budget of the training loop")
    a("--total_minutes", type=float, default=6.0, help="budget of the whole run, from start")
    # Evaluation
    a("--eval_every", type=int, default=250)
    a("--heldout_episodes", type=int, default=96)
    a("--sst2_shots", default="0,1,4,8,16,32")
    a("--sst2_flipped_shots", default="4,16,32")
    a("--sst2_samples", type=int, default=5)
    a("--sst2_test_limit", type=int, default=0, help="0: the whole dev split (872)")
    a("--eval_batch", type=int, default=64)
    # Export
    a("--export_dtype", default="bf16", choices=["bf16", "f32"])
    a("--max_shard_mib", type=float, default=15.0)
    # Machinery
    a("--device", default="", help="cuda or cpu (default: cuda when available)")
    a("--amp", default="", choices=["", "bf16", "none"], help="default: bf16 on cuda")
    a("--attention", default="auto", choices=["auto", "sdpa", "math"])
    a("--dry_run", action="store_true", help="no torch: load data, build a batch, print the plan")
    return ap.parse_args(argv)


def parse_ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def lr_at(step, total, args):
    """Linear warm-up, then cosine to min_lr_ratio * lr at `total`. Steps before --warmup do not
    depend on `total` (so --steps=auto can fix it during warm-up)."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 *
                      (1 + math.cos(math.pi * progress)))


def log(*parts):
    print(*parts, flush=True)


# ------------------------------------------------------------------------------------------------
# Batches, built in worker processes (numpy only) so the GPU never waits for Python
# ------------------------------------------------------------------------------------------------

def batch_worker(data_dir, ctx_len, own_template_prob, weighting, seed, worker, batch_size,
                 lm_positions, queue):
    """Puts this worker's batches, in order, on its queue. Batch j of the run comes from worker
    j % workers, whose stream is seeded [seed, 1000 + worker]: the order is a function of --seed
    and --workers alone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    data = icl_data.IclData(data_dir, verify=False)
    sampler = episodes.EpisodeSampler(data, icl_data.TRAIN, ctx_len, own_template_prob, weighting)
    rng = np.random.default_rng([seed, 1000 + worker])
    while True:
        b = sampler.batch(rng, batch_size, lm_positions)
        queue.put({"inputs": b["inputs"].astype(np.int32), "label_index": b["label_index"],
                   "label_target": b["label_target"], "lm_index": b["lm_index"],
                   "lm_target": b["lm_target"]})


class Batches:
    def __init__(self, args):
        import multiprocessing as mp
        ctx = mp.get_context("spawn")  # never fork a process that holds CUDA state
        self.queues, self.procs = [], []
        for w in range(args.workers):
            q = ctx.Queue(maxsize=6)
            p = ctx.Process(target=batch_worker, daemon=True,
                            args=(args.data_dir, args.n_positions, args.own_template_prob,
                                  args.weighting, args.seed, w, args.batch_size,
                                  args.lm_positions, q))
            p.start()
            self.queues.append(q)
            self.procs.append(p)
        self.next_index = 0

    def get(self, stop):
        """The next batch, or None once `stop` says why to stop (a worker killed by the same
        signal must not leave the loop waiting)."""
        import queue
        q = self.queues[self.next_index % len(self.queues)]
        waited = 0
        while True:
            try:
                b = q.get(timeout=1)
                break
            except queue.Empty:
                waited += 1
                if stop["why"]:
                    return None
                if waited > 300 or not all(p.is_alive() for p in self.procs):
                    raise RuntimeError("a batch worker died or stalled")
        self.next_index += 1
        return b

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.join(timeout=10)


# ------------------------------------------------------------------------------------------------
# The model (torch), named and laid out as GPT2LMHeadModel
# ------------------------------------------------------------------------------------------------

def build_model(torch, args, attention):
    nn = torch.nn
    F = torch.nn.functional

    class Conv1D(nn.Module):
        """transformers' Conv1D: weight [in, out], y = x @ W + b."""

        def __init__(self, n_in, n_out):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(n_in, n_out))
            self.bias = nn.Parameter(torch.zeros(n_out))

        def forward(self, x):
            y = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
            return y.view(*x.shape[:-1], self.weight.shape[1])

    class Attention(nn.Module):
        def __init__(self, d, heads, positions):
            super().__init__()
            self.heads = heads
            self.c_attn = Conv1D(d, 3 * d)
            self.c_proj = Conv1D(d, d)
            # Not a parameter and not persistent: the state_dict stays GPT2LMHeadModel's.
            self.register_buffer("causal", torch.ones(positions, positions, dtype=torch.bool)
                                 .tril(), persistent=False)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                       for z in (q, k, v))
            if attention["impl"] == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(c // self.heads))
                s = s.masked_fill(~self.causal[:t, :t], float("-inf"))
                y = torch.softmax(s, dim=-1, dtype=torch.float32).to(v.dtype) @ v
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Mlp(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.c_fc = Conv1D(d, 4 * d)
            self.c_proj = Conv1D(4 * d, d)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # = HF gelu_new

    class Block(nn.Module):
        def __init__(self, d, heads, positions):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d, eps=1e-5)
            self.attn = Attention(d, heads, positions)
            self.ln_2 = nn.LayerNorm(d, eps=1e-5)
            self.mlp = Mlp(d)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.n_embd
            self.wte = nn.Embedding(50257, d)
            self.wpe = nn.Embedding(args.n_positions, d)
            self.h = nn.ModuleList(Block(d, args.n_head, args.n_positions)
                                   for _ in range(args.n_layer))
            self.ln_f = nn.LayerNorm(d, eps=1e-5)

    class Gpt2(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = Transformer()

        def hidden(self, ids):
            tr = self.transformer
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = tr.wte(ids) + tr.wpe(pos)[None]
            for block in tr.h:
                x = block(x)
            return tr.ln_f(x)

        def logits(self, h):
            return h @ self.transformer.wte.weight.t()  # tied lm_head

    model = Gpt2()
    # GPT-2's initialisation, from a CPU generator (the same on every machine).
    gen = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or \
                    name.endswith("ln_f.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                std = 0.02
                if name.endswith("c_proj.weight"):
                    std = 0.02 / math.sqrt(2 * args.n_layer)  # residual projections, as GPT-2
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    expected = export_hf.gpt2_tensor_shapes(args.n_layer, args.n_embd, args.n_positions)
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == {k: tuple(s) for k, s in expected}, "state_dict is not GPT2LMHeadModel's"
    return model


# ------------------------------------------------------------------------------------------------
# Training pieces
# ------------------------------------------------------------------------------------------------

class Trainer:
    def __init__(self, torch, args, device, attention):
        self.torch = torch
        self.args = args
        self.device = device
        self.attention = attention
        self.model = build_model(torch, args, attention).to(device)
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=args.lr, betas=(0.9, args.beta2), eps=1e-8)
        self.amp = args.amp == "bf16"

    def autocast(self):
        torch = self.torch
        if self.amp:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return torch.autocast(device_type=self.device.type, enabled=False)

    def to_device(self, b):
        t = self.torch
        out = {}
        for k, v in b.items():
            out[k] = t.from_numpy(np.ascontiguousarray(v)).to(self.device, non_blocking=True)
        out["inputs"] = out["inputs"].long()
        return out

    def loss(self, b):
        """Mean NLL of the label words + lm_weight * mean NLL of the sampled other tokens."""
        torch = self.torch
        with self.autocast():
            h = self.model.hidden(b["inputs"])
            flat = h.reshape(-1, h.shape[-1])
            n_label = b["label_index"].shape[0]
            idx = torch.cat([b["label_index"], b["lm_index"]])
            tgt = torch.cat([b["label_target"], b["lm_target"]])
            logits = self.model.logits(flat[idx])
        logp = torch.log_softmax(logits.float(), dim=-1)
        # A 1-D gather (deterministic backward), not a 2-D one.
        picked = logp.reshape(-1)[torch.arange(len(tgt), device=logp.device) * logp.shape[1] + tgt]
        label_nll = -picked[:n_label].mean()
        lm_nll = -picked[n_label:].mean() if len(tgt) > n_label else label_nll * 0
        return label_nll + self.args.lm_weight * lm_nll, label_nll, lm_nll

    def step(self, b, lr):
        for group in self.opt.param_groups:
            group["lr"] = lr
        loss, label_nll, lm_nll = self.loss(b)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.grad_clip)
        self.opt.step()
        return loss.detach(), label_nll.detach(), lm_nll.detach(), gnorm.detach()

    def gradients(self, b):
        """A fresh backward (no optimizer step): for the determinism probe."""
        self.opt.zero_grad(set_to_none=True)
        loss, _, _ = self.loss(b)
        loss.backward()
        grads = [p.grad.detach().clone() for p in self.model.parameters()]
        self.opt.zero_grad(set_to_none=True)
        return grads

    # -- evaluation --------------------------------------------------------------------------

    def heldout(self, sampler, eps, names):
        """Label accuracy over each episode's own label words, on the fixed held-out episodes."""
        torch = self.torch
        self.model.eval()
        correct, shots, dsets, nll = [], [], [], []
        with torch.no_grad():
            for i in range(0, len(eps), 32):
                b = sampler.batch(None, 0, lm_positions=0, episodes=eps[i:i + 32])
                inputs = torch.from_numpy(np.ascontiguousarray(b["inputs"])).to(self.device)
                with self.autocast():
                    h = self.model.hidden(inputs)
                    flat = h.reshape(-1, h.shape[-1])
                    logits = self.model.logits(
                        flat[torch.from_numpy(b["label_index"]).to(self.device)]).float()
                logp = torch.log_softmax(logits, dim=-1).cpu().numpy()
                cands = b["label_cands"]
                sc = np.where(cands >= 0, np.take_along_axis(logp, np.maximum(cands, 0), 1),
                              -np.inf)
                correct.append(np.argmax(sc, axis=1) == b["label_gold"])
                shots.append(b["label_shots"])
                dsets.append(b["label_dataset"])
                nll.append(-logp[np.arange(len(logp)), b["label_target"]])
        self.model.train()
        correct, shots, dsets, nll = map(np.concatenate, (correct, shots, dsets, nll))
        sent = np.isin(dsets, [names.index(n) for n in SENTIMENT if n in names])
        pick = lambda m: float(correct[m].mean()) if m.any() else None  # noqa: E731 (JSON: null)
        return {"acc": pick(np.ones_like(correct)), "acc_shots_lt2": pick(shots < 2),
                "acc_shots_ge8": pick(shots >= 8), "acc_sentiment_ge8": pick(sent & (shots >= 8)),
                "label_nll": float(nll.mean()), "labels": int(len(correct))}

    def next_logits(self, prompts, ids):
        """[len(prompts), len(ids)] next-token logits after each prompt, batched by length."""
        torch = self.torch
        self.model.eval()
        order = np.argsort([len(p) for p in prompts], kind="stable")
        out = np.zeros((len(prompts), len(ids)), dtype=np.float64)
        wte_ids = torch.tensor(ids, device=self.device)
        with torch.no_grad():
            for i in range(0, len(order), self.args.eval_batch):
                rows = order[i:i + self.args.eval_batch]
                n = max(len(prompts[r]) for r in rows)
                batch = np.full((len(rows), n), 50256, dtype=np.int64)
                for j, r in enumerate(rows):
                    batch[j, :len(prompts[r])] = prompts[r]
                last = torch.tensor([len(prompts[r]) - 1 for r in rows], device=self.device)
                with self.autocast():
                    h = self.model.hidden(torch.from_numpy(batch).to(self.device))
                    h_last = h[torch.arange(len(rows), device=self.device), last]
                    logits = h_last @ self.model.transformer.wte.weight[wte_ids].t()
                out[rows] = logits.float().cpu().numpy()
        self.model.train()
        return out


def probe_determinism(torch, trainer, probe_batch):
    """Same batch, two backwards: bit-identical gradients? (Before any optimizer step.)"""
    g1 = trainer.gradients(probe_batch)
    g2 = trainer.gradients(probe_batch)
    return all(torch.equal(a, b) for a, b in zip(g1, g2))


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------

def dry_run(args):
    data = icl_data.IclData(args.data_dir)
    sampler = episodes.EpisodeSampler(data, icl_data.TRAIN, args.n_positions,
                                      args.own_template_prob, args.weighting)
    rng = np.random.default_rng([args.seed, 1000])
    b = sampler.batch(rng, min(args.batch_size, 8), args.lm_positions)
    params = export_hf.parameter_count(args.n_layer, args.n_embd, args.n_positions)
    elem = 2 if args.export_dtype == "bf16" else 4
    shapes = export_hf.gpt2_tensor_shapes(args.n_layer, args.n_embd, args.n_positions)
    plan = export_hf.plan_shards([(n, int(np.prod(s)) * elem) for n, s in shapes],
                                 int(args.max_shard_mib * 2**20))
    sizes = [sum(int(np.prod(dict(shapes)[n])) * elem for n in names) for names in plan]
    print(json.dumps({
        "parameters": params, "data_index_sha256": data.index_sha256,
        "datasets": dict(zip(sampler.names, [round(float(w), 4) for w in sampler.weights])),
        "tokens_per_step": args.batch_size * args.n_positions,
        "labels_per_episode": round(len(b["label_index"]) / min(args.batch_size, 8), 1),
        "shard_bytes": sizes, "export_dtype": args.export_dtype,
        "sst2_dev_inputs": len(data.sst2(icl_data.SST2_DEV)),
    }, indent=1))
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    t_start = time.time()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts
    os.makedirs(args.out_dir, exist_ok=True)
    data = icl_data.IclData(args.data_dir)
    batches = Batches(args)  # workers start before torch touches CUDA
    stop = {"why": ""}

    def on_signal(signum, _frame):
        stop["why"] = signal.Signals(signum).name
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    import torch
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if not args.amp:
        args.amp = "bf16" if device.type == "cuda" else "none"
    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    deterministic = "strict"
    torch.use_deterministic_algorithms(True)
    has_sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    attention = {"impl": "sdpa" if args.attention in ("auto", "sdpa") and has_sdpa else "math"}
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    log(f"train: torch {torch.__version__}, device {device} ({gpu}), amp {args.amp}, "
        f"attention {attention['impl']}, data {data.index_sha256[:16]}")

    trainer = Trainer(torch, args, device, attention)
    params = sum(p.numel() for p in trainer.model.parameters())
    log(f"train: {params / 1e6:.2f} M parameters ({args.n_layer} layers, n_embd {args.n_embd}, "
        f"{args.n_head} heads, {args.n_positions} positions)")

    # Determinism probe on a batch of its own (the training stream is untouched).
    probe_sampler = episodes.EpisodeSampler(data, icl_data.TRAIN, args.n_positions,
                                            args.own_template_prob, args.weighting)
    pb = probe_sampler.batch(np.random.default_rng([args.seed, 77]), min(args.batch_size, 16),
                             args.lm_positions)
    probe = trainer.to_device({k: pb[k] for k in ("inputs", "label_index", "label_target",
                                                  "lm_index", "lm_target")})
    repeatable = None
    for _ in range(3):
        try:
            repeatable = probe_determinism(torch, trainer, probe)
        except RuntimeError as e:  # an op with no deterministic implementation?
            if "determinis" not in str(e).lower():
                raise  # a real error: fail now, not after minutes of device time
            log(f"train: determinism probe raised: {str(e).splitlines()[0]}")
            if attention["impl"] == "sdpa":
                attention["impl"] = "math"
                continue
            torch.use_deterministic_algorithms(True, warn_only=True)
            deterministic = "warn_only"
            continue
        if not repeatable and attention["impl"] == "sdpa" and args.attention == "auto":
            log("train: SDPA gradients differ between two identical backwards: explicit attention")
            attention["impl"] = "math"
            continue
        break
    log(f"train: determinism {deterministic}, attention {attention['impl']}, identical "
        f"gradients on a repeated backward: {repeatable}")
    if device.type == "cuda":
        torch.cuda.synchronize()

    names = [d["name"] for d in data.datasets]
    h_sampler, h_eps = episodes.heldout_episodes(data, args.n_positions, args.heldout_episodes,
                                                 seed=4242)
    t_eval0 = time.time()
    history = [{"step": 0, **trainer.heldout(h_sampler, h_eps, names)}]
    t_eval = time.time() - t_eval0
    log(f"eval step 0: {json.dumps(history[-1])} ({t_eval:.1f} s)")

    total = None if args.steps == "auto" else int(args.steps)
    if args.warmup < 40:
        raise SystemExit("--warmup must be at least 40 (--steps=auto calibrates in warm-up)")
    if total is not None and total <= args.warmup:
        raise SystemExit("--steps must exceed --warmup")
    t_train0 = time.time()
    train_deadline = t_train0 + args.max_minutes * 60
    calib = (10, 40)
    t_calib = None
    step = 0
    tokens = 0
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    losses = []
    loop_error = None
    try:  # whatever goes wrong in the loop, the weights trained so far are still exported
        while True:
            if total is not None and step >= total:
                break
            if args.stop_after_steps and step >= args.stop_after_steps:
                stop["why"] = stop["why"] or "stop_after_steps"
            if time.time() > train_deadline:
                stop["why"] = stop["why"] or "max_minutes"
            if stop["why"]:
                break
            if step == calib[0]:
                sync()
                t_calib = time.time()
            if step == calib[1] and total is None:
                sync()
                per_step = (time.time() - t_calib) / (calib[1] - calib[0])
                left = train_deadline - time.time()
                total = calib[1] + int(0.95 * left / (per_step + t_eval / args.eval_every))
                total = max(total, args.warmup + 50)
                log(f"train: {per_step * 1000:.1f} ms/step "
                    f"({args.batch_size * args.n_positions / per_step / 1e6:.2f} M tokens/s): "
                    f"--steps={total} fits --max_minutes={args.max_minutes}")
            lr = lr_at(step, total if total is not None else 10**9, args)
            host_batch = batches.get(stop)
            if host_batch is None:
                break
            b = trainer.to_device(host_batch)
            loss, lnll, mnll, gnorm = trainer.step(b, lr)
            tokens += args.batch_size * args.n_positions
            step += 1
            if step % 50 == 0 or step == 1:
                losses.append((step, float(loss), float(lnll), float(mnll)))
                log(f"step {step}: loss {float(loss):.4f} label_nll {float(lnll):.4f} "
                    f"lm_nll {float(mnll):.4f} grad_norm {float(gnorm):.3f} lr {lr:.2e} "
                    f"({time.time() - t_train0:.0f} s)")
            if step % args.eval_every == 0:
                history.append({"step": step, **trainer.heldout(h_sampler, h_eps, names)})
                log(f"eval step {step}: {json.dumps(history[-1])}")
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        loop_error = f"{type(e).__name__}: {e}"
        stop["why"] = f"error in the training loop: {loop_error}"[:300]
    sync()
    t_train = time.time() - t_train0
    batches.close()
    if total is None:  # stopped before the step count was fixed
        total = max(step, args.warmup + 1)
    log(f"train: stopped at step {step} of {total} ({stop['why'] or 'done'}), {t_train:.0f} s, "
        f"{tokens / 1e6:.0f} M tokens")

    # Ship what is evaluated: weights rounded to the export dtype first.
    with torch.no_grad():
        if args.export_dtype == "bf16":
            for p in trainer.model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    model_dir = os.path.join(args.out_dir, "model")
    try:
        state = {k: v.detach().float().cpu().numpy()
                 for k, v in trainer.model.state_dict().items()}
        written = export_hf.export_hf_dir(model_dir, state, args.n_layer, args.n_embd,
                                          args.n_head, args.n_positions, args.data_dir,
                                          dtype=args.export_dtype,
                                          max_shard_bytes=int(args.max_shard_mib * 2**20))
    except Exception:
        # Keep the weights whatever went wrong: a bf16 torch checkpoint the export can be redone
        # from (tools/gpu/train_icl_model.sh brings it back in parts).
        path = os.path.join(args.out_dir, "state_dict.pt")
        torch.save({k: v.detach().to(torch.bfloat16).cpu()
                    for k, v in trainer.model.state_dict().items()}, path)
        log(f"export failed; weights saved to {path}")
        raise
    files = {n: {"bytes": written[n], "sha256": sha256_file(os.path.join(model_dir, n))}
             for n in sorted(written)}
    provenance_path = os.path.join(args.out_dir, "PROVENANCE.json")
    # Rerunning this repeats the weights bit for bit (same GPU type and software): the step
    # count is fixed, and the time limits, which then only guard, are generous.
    repro_settings = dict(vars(args), max_minutes=round(args.max_minutes * 2 + 1, 1),
                          total_minutes=round(args.total_minutes * 2 + 1, 1))
    repro = ["python3", "-u", "tools/icl_model/train.py", f"--data_dir={args.data_dir}",
             f"--out_dir={args.out_dir}"] + [
        f"--{k}={v}" for k, v in sorted(repro_settings.items())
        if k not in ("data_dir", "out_dir", "dry_run", "steps", "stop_after_steps")] + [
        f"--steps={total}"] + ([f"--stop_after_steps={step}"] if total and step < total else [])
    provenance = {
        "what": "small GPT-2-architecture ICL demonstration model: trained "
                "from scratch on meta-ICL episodes with randomised label words; SST-2 held out",
        "commit": args.commit, "seed": args.seed, "settings": vars(args),
        "parameters": params, "steps_planned": total, "steps_done": step,
        "stopped_by": stop["why"] or "steps", "loop_error": loop_error, "tokens_seen": tokens,
        "data_index_sha256": data.index_sha256,
        "data_settings": data.index["settings"],
        "torch": torch.__version__, "cuda": torch.version.cuda, "device": gpu,
        "deterministic_algorithms": deterministic, "attention": attention["impl"],
        "identical_gradients_on_repeat": repeatable,
        "reproduce": " ".join(repro),
        "timings_s": {"train": round(t_train, 1), "heldout_eval": round(t_eval, 2)},
        "heldout_history": history, "loss_history": losses,
        "files": files, "metrics": {"status": "evaluating"},
    }
    write_json(provenance_path, provenance)
    log(f"export: {model_dir}: " + ", ".join(f"{n} {v['bytes']}" for n, v in files.items()))
    try:
        provenance["export_parity"] = export_parity(torch, trainer, model_dir, data)
    except Exception as e:  # noqa: BLE001
        provenance["export_parity"] = {"error": f"{type(e).__name__}: {e}"}
    log(f"export parity: {json.dumps(provenance['export_parity'])}")
    write_json(provenance_path, provenance)

    # Evaluation, within --total_minutes. The model is exported already: an error here is
    # recorded in PROVENANCE.json instead of losing the run.
    try:
        if loop_error:
            raise RuntimeError(f"not evaluated: the training loop failed ({loop_error})")
        provenance["metrics"] = evaluate_all(args, data, trainer, h_sampler, h_eps, names,
                                             t_start + args.total_minutes * 60, provenance)
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        provenance["metrics"] = {"status": f"evaluation failed: {type(e).__name__}: {e}"}
    provenance["timings_s"]["total"] = round(time.time() - t_start, 1)
    write_json(provenance_path, provenance)
    log(f"train: done in {time.time() - t_start:.0f} s; {provenance_path}")
    return 1 if loop_error else 0  # the model is exported either way; the caller should look


def export_parity(torch, trainer, model_dir, data):
    """Logits of this torch model (float32, no autocast) against the NumPy reference forward
    (tools/reference/reference.py, float64) of the EXPORTED directory, on an SST-2 prompt: the
    export and train.py's architecture must agree with GPT2LMHeadModel's semantics. ok: within
    1e-3 x max(1, logit std) (1e-6 measured on a CPU; swapping q and k in the attention already
    misses by 1.5e-3 on a barely trained 2-layer model, a trained one by far more)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools",
                                    "reference"))
    import reference
    prompts, _, used = sst2_eval.conventional_prompts(
        data, 4, 1, data.sst2_word_ids(), n_positions=trainer.args.n_positions, test_limit=1)
    tokens = prompts[0]
    expected = reference.load_model(model_dir).forward(tokens.tolist(),
                                                       list(range(len(tokens))))
    trainer.model.eval()
    with torch.no_grad():
        h = trainer.model.hidden(torch.from_numpy(tokens[None]).to(trainer.device))
        got = trainer.model.logits(h[0]).double().cpu().numpy()
    trainer.model.train()
    diff = float(np.max(np.abs(got - expected)))
    limit = 1e-3 * max(1.0, float(np.std(expected)))
    out = {"tokens": int(len(tokens)), "max_abs_logit_diff": diff,
           "logit_std": float(np.std(expected)), "ok": bool(diff < limit)}
    # And transformers itself, where the machine has it: does GPT2LMHeadModel load the directory
    # and compute the same logits?
    try:
        import transformers
    except ImportError:
        out["transformers"] = "not installed"
        return out
    try:
        hf = transformers.GPT2LMHeadModel.from_pretrained(model_dir).float().eval()
        with torch.no_grad():
            hf_logits = hf(torch.from_numpy(tokens[None])).logits[0].double().numpy()
        hf_diff = float(np.max(np.abs(hf_logits - expected)))
        out["transformers"] = {"version": transformers.__version__,
                               "max_abs_logit_diff": hf_diff, "ok": bool(hf_diff < limit)}
    except Exception as e:  # noqa: BLE001
        out["transformers"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    return out


def evaluate_all(args, data, trainer, h_sampler, h_eps, names, deadline, provenance):
    """Final held-out accuracy and SST-2 conventional k-shot accuracy (preset and swapped
    words), skipping cells that would pass `deadline`."""
    metrics = {"heldout_final": trainer.heldout(h_sampler, h_eps, names)}
    log(f"eval final: {json.dumps(metrics['heldout_final'])}")
    t0 = time.time()
    kw = dict(n_positions=args.n_positions, test_limit=args.sst2_test_limit)
    for key, shots, flipped in (("sst2_conventional", parse_ints(args.sst2_shots), False),
                                ("sst2_conventional_flipped", parse_ints(args.sst2_flipped_shots),
                                 True)):
        done = []
        for k in shots:
            if time.time() > deadline - 20:
                metrics.setdefault("skipped_for_time", []).append(f"{key} {k}")
                continue
            r = sst2_eval.evaluate(data, trainer.next_logits, [k], args.sst2_samples,
                                   flipped=flipped, **kw)
            done.append(r)
        if done:
            merged = {"majority_rate": done[0]["majority_rate"], "flipped": flipped,
                      "label_words": data.index["sst2_eval"]["words"],
                      "by_shots": {k: v for r in done for k, v in r["by_shots"].items()}}
            metrics[key] = merged
            words = "flipped words" if flipped else "preset words"
            log(sst2_eval.format_table(f"SST-2 dev, conventional, torch ({words})", merged))
    provenance["timings_s"]["sst2_eval"] = round(time.time() - t0, 1)
    return metrics


if __name__ == "__main__":
    sys.exit(main())
