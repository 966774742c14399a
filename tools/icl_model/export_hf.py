"""Hugging Face GPT-2 export without torch: {name: numpy array} -> a model directory.

train.py hands over its state_dict as numpy arrays; the names and layouts are GPT2LMHeadModel's
(gpt2_tensor_shapes), Conv1D weights [in, out], lm_head tied to transformer.wte and therefore not
stored (as transformers saves a tied GPT-2). The directory is what both transformers and
manyshot's loader (engine/model/safetensors.cc, model_config.cc) read:

  config.json                       GPT2Config fields
  model-0000i-of-0000n.safetensors  shards of at most max_shard_bytes, except that a tensor larger
                                    than that is a shard of its own (the format never splits a
                                    tensor: GPT-2's token embedding is 50257 x n_embd)
  model.safetensors.index.json      {"metadata": {"total_size"}, "weight_map": {name: shard}}
  vocab.json, merges.txt            the GPT-2 tokenizer, copied

Output bytes depend only on the arrays and arguments (sorted JSON, fixed tensor order), so the
same weights give the same files. bf16 is rounded to nearest even from float32.

Runs with /usr/bin/python3 + numpy (here) and with train.py's python (the GPU machine).
"""

import json
import os
import shutil
import struct

import numpy as np

GPT2_BOS = 50256


def gpt2_tensor_shapes(n_layer, n_embd, n_positions, vocab_size=50257, n_inner=None):
    """[(name, shape)] of GPT2LMHeadModel's stored tensors, in export order."""
    d, f = n_embd, (n_inner or 4 * n_embd)
    out = [("transformer.wte.weight", (vocab_size, d)),
           ("transformer.wpe.weight", (n_positions, d))]
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        out += [(p + "ln_1.weight", (d,)), (p + "ln_1.bias", (d,)),
                (p + "attn.c_attn.weight", (d, 3 * d)), (p + "attn.c_attn.bias", (3 * d,)),
                (p + "attn.c_proj.weight", (d, d)), (p + "attn.c_proj.bias", (d,)),
                (p + "ln_2.weight", (d,)), (p + "ln_2.bias", (d,)),
                (p + "mlp.c_fc.weight", (d, f)), (p + "mlp.c_fc.bias", (f,)),
                (p + "mlp.c_proj.weight", (f, d)), (p + "mlp.c_proj.bias", (d,))]
    out += [("transformer.ln_f.weight", (d,)), ("transformer.ln_f.bias", (d,))]
    return out


def parameter_count(n_layer, n_embd, n_positions, vocab_size=50257, n_inner=None):
    return sum(int(np.prod(s)) for _, s in
               gpt2_tensor_shapes(n_layer, n_embd, n_positions, vocab_size, n_inner))


def hf_config(n_layer, n_embd, n_head, n_positions, vocab_size=50257, n_inner=None,
              dtype="bf16"):
    """config.json of a GPT2LMHeadModel (the keys transformers and model_config.cc read)."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": vocab_size,
        "n_embd": n_embd,
        "n_layer": n_layer,
        "n_head": n_head,
        "n_positions": n_positions,
        "n_ctx": n_positions,
        "n_inner": n_inner or 4 * n_embd,
        "layer_norm_epsilon": 1e-05,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "bos_token_id": GPT2_BOS,
        "eos_token_id": GPT2_BOS,
        "torch_dtype": {"bf16": "bfloat16", "f32": "float32"}[dtype],
        "use_cache": True,
    }


def to_bf16_bits(array):
    """float32 -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    x = np.ascontiguousarray(array, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, np.uint16(0x7FC0), rounded)
    return rounded


def bf16_round(array):
    """The float32 values bf16 storage keeps (what a loader reads back)."""
    return (to_bf16_bits(array).astype(np.uint32) << 16).view(np.float32)


def encode_tensor(array, dtype):
    if dtype == "bf16":
        return "BF16", to_bf16_bits(array).astype("<u2").tobytes()
    if dtype == "f32":
        return "F32", np.ascontiguousarray(array, dtype="<f4").tobytes()
    raise ValueError(f"unsupported dtype {dtype}")


def write_safetensors(path, tensors, dtype):
    """tensors: [(name, array)] in file order. Header: sorted JSON padded to 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors:
        tag, blob = encode_tensor(array, dtype)
        header[name] = {"dtype": tag, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}  # transformers refuses a file without it
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return offset


def plan_shards(named_sizes, max_shard_bytes):
    """Greedy, in order: a shard closes when the next tensor would pass max_shard_bytes."""
    shards, current, size = [], [], 0
    for name, nbytes in named_sizes:
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += nbytes
    if current:
        shards.append(current)
    return shards


def check_tensors(tensors, shapes):
    expected = dict(shapes)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(f"tensor names differ from GPT2LMHeadModel's: missing {missing[:5]}, "
                         f"unexpected {extra[:5]}")
    for name, shape in shapes:
        if tuple(tensors[name].shape) != tuple(shape):
            raise ValueError(f"{name}: shape {tuple(tensors[name].shape)}, expected {shape}")
        if not np.all(np.isfinite(tensors[name])):
            raise ValueError(f"{name}: not finite")


def export_hf_dir(out_dir, tensors, n_layer, n_embd, n_head, n_positions, tokenizer_dir,
                  dtype="bf16", max_shard_bytes=15 * 2**20, vocab_size=50257, n_inner=None):
    """Writes the model directory; returns {file name: bytes}. `tensors`: {name: array}."""
    shapes = gpt2_tensor_shapes(n_layer, n_embd, n_positions, vocab_size, n_inner)
    check_tensors(tensors, shapes)
    os.makedirs(out_dir, exist_ok=True)
    elem = {"bf16": 2, "f32": 4}[dtype]
    plan = plan_shards([(n, int(np.prod(s)) * elem) for n, s in shapes], max_shard_bytes)
    written, weight_map, total = {}, {}, 0
    for i, names in enumerate(plan):
        fname = f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors"
        total += write_safetensors(os.path.join(out_dir, fname),
                                   [(n, np.asarray(tensors[n])) for n in names], dtype)
        for n in names:
            weight_map[n] = fname
        written[fname] = os.path.getsize(os.path.join(out_dir, fname))
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    files = {
        "model.safetensors.index.json": index,
        "config.json": hf_config(n_layer, n_embd, n_head, n_positions, vocab_size, n_inner,
                                 dtype),
    }
    for name, obj in files.items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")
        written[name] = os.path.getsize(os.path.join(out_dir, name))
    for name in ("vocab.json", "merges.txt"):
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))
        written[name] = os.path.getsize(os.path.join(out_dir, name))
    return written
