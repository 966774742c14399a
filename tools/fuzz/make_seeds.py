#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Small, valid (or nearly valid) inputs of every format, so that fuzzing starts from inputs that
reach deep into each parser: libFuzzer and the replay driver mutate from here. Deterministic;
rerun after changing a format, then commit the result.

Usage: /usr/bin/python3 tools/fuzz/make_seeds.py [repo_root]
(/usr/bin/python3: Debian's python3-sentencepiece trains the tokenizer.model seeds.)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
GPT2_DIR = "/usr/local/share/manyshot/gpt2"  # installed by scripts/setup.sh


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- safetensors -----------------------------------------------------------------------------

def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] -> the file's bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def f32(*v):
    return struct.pack(f"<{len(v)}f", *v)


def f16(*v):
    return struct.pack(f"<{len(v)}e", *v)


def bf16(*v):
    return b"".join(struct.pack("<f", x)[2:] for x in v)


def safetensors_seeds():
    write("safetensors", "three_dtypes", safetensors(
        [("w", "F32", [2, 3], f32(0.5, -1, 2, 3.25, 0, 1e-3)),
         ("b", "BF16", [3], bf16(1, 2, 3)),
         ("h", "F16", [2, 2], f16(1, -1, 0.25, 8))], {"format": "pt"}))
    write("safetensors", "empty", safetensors([]))
    write("safetensors", "scalar_and_zero", safetensors(
        [("s", "F32", [], f32(7)), ("z", "F16", [0, 4], b"")]))
    write("safetensors", "padded_header", struct.pack("<Q", 64) +
          b'{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'.ljust(64) + f32(1))
    shard = safetensors([("a", "F32", [2], f32(1, 2)), ("c", "BF16", [1], bf16(3))])
    index = json.dumps({"metadata": {"total_size": 10},
                        "weight_map": {"a": "model-00001.safetensors",
                                       "c": "model-00001.safetensors"}})
    write("safetensors", "sharded", index.encode() + b"\0" + shard)


# --- config.json -----------------------------------------------------------------------------

def config_seeds():
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 320,
             "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
             "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
             "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
             "torch_dtype": "float32", "attention_bias": False, "mlp_bias": False}
    write("config_json", "llama", json.dumps(llama, indent=2))
    mistral = dict(llama, model_type="mistral", sliding_window=4096, eos_token_id=[2, 3],
                   head_dim=16)
    write("config_json", "mistral", json.dumps(mistral, indent=2))
    qwen2 = dict(llama, model_type="qwen2", tie_word_embeddings=True, bos_token_id=None,
                 rope_theta=1000000.0)
    write("config_json", "qwen2", json.dumps(qwen2, indent=2))
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 300,
            "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "n_inner": None,
            "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "bos_token_id": 299,
            "eos_token_id": 299}
    write("config_json", "gpt2", json.dumps(gpt2, indent=2))
    bloom = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "vocab_size": 300,
             "hidden_size": 64, "n_layer": 2, "n_head": 4, "layer_norm_epsilon": 1e-5,
             "apply_residual_connection_post_layernorm": False, "seq_length": 256,
             "bos_token_id": 1, "eos_token_id": 2, "pretraining_tp": 1, "slow_but_exact": False}
    write("config_json", "bloom", json.dumps(bloom, indent=2))
    opt = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 300,
           "hidden_size": 64, "word_embed_proj_dim": 64, "ffn_dim": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "max_position_embeddings": 256, "do_layer_norm_before": False,
           "_remove_final_layer_norm": False, "activation_function": "relu", "enable_bias": True,
           "bos_token_id": 2, "eos_token_id": 2}
    write("config_json", "opt", json.dumps(opt, indent=2))


# --- tokenizers ------------------------------------------------------------------------------

def small_gpt2(out_dir, merges_kept=60):
    """A GPT-2 vocabulary cut to its 256 byte tokens, the first merges and <|endoftext|>."""
    with open(os.path.join(GPT2_DIR, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(GPT2_DIR, "merges.txt"), encoding="utf-8") as f:
        lines = [l for l in f.read().split("\n") if l and not l.startswith("#version")]
    by_id = {i: t for t, i in vocab.items()}
    small = {by_id[i]: i for i in range(256)}
    merges = []
    for line in lines:
        a, b = line.split(" ")
        if a in small and b in small and a + b in vocab:
            small.setdefault(a + b, len(small))
            merges.append(line)
            if len(merges) == merges_kept:
                break
    small["<|endoftext|>"] = len(small)
    os.makedirs(out_dir, exist_ok=True)
    vocab_text = json.dumps(small, ensure_ascii=False)
    merges_text = "#version: 0.2\n" + "\n".join(merges) + "\n"
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        f.write(vocab_text)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(merges_text)
    return vocab_text, merges_text


def train_sp(out_prefix, model_type, vocab_size):
    import sentencepiece as spm
    spm.set_random_generator_seed(1)  # else two runs write different (equivalent) models
    sentences = os.path.join(ROOT, "tests", "data", "tokenizer", "parity_sentences.txt")
    with open(sentences, encoding="utf-8") as f:
        text = [l for l in f.read().split("\n")[:3000] if l.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=out_prefix, model_type=model_type,
        vocab_size=vocab_size, byte_fallback=(model_type == "bpe"), split_digits=True,
        character_coverage=0.98, num_threads=1, normalization_rule_name="identity",
        remove_extra_whitespaces=False, unk_id=0, bos_id=1, eos_id=2,
        minloglevel=2)
    with open(out_prefix + ".model", "rb") as f:
        return f.read()


def train_sp_unigram_with_rules(work):
    """A small T5-style Unigram model (byte fallback, whitespace folding) whose precompiled
    normalization rules are a handful of nmt_nfkc-like ones, so the seed stays small."""
    import sentencepiece as spm
    spm.set_random_generator_seed(1)
    rules = os.path.join(work, "rules.tsv")
    with open(rules, "w", encoding="utf-8") as f:
        # source code points -> target code points (hex): ligature fi, fullwidth A, tab, NBSP,
        # circled 1, and a deletion (zero-width space -> nothing).
        f.write("FB01\t66 69\nFF21\t41\n9\t20\nA0\t20\n2460\t31\n200B\t\n")
    sentences = os.path.join(ROOT, "tests", "data", "tokenizer", "parity_sentences.txt")
    with open(sentences, encoding="utf-8") as f:
        text = [l for l in f.read().split("\n")[:3000] if l.strip()]
    prefix = os.path.join(work, "sp_uni_rules")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=prefix, model_type="unigram",
        vocab_size=300, byte_fallback=True, character_coverage=0.98, num_threads=1,
        normalization_rule_tsv=rules, user_defined_symbols=["http"],
        control_symbols=["<extra_id_0>"], pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        minloglevel=2)
    return prefix + ".model"


def tokenizer_seeds(work):
    text = "Hello world, it's 12345 naïve café 🙂\n\tend<|endoftext|>"
    vocab, merges = small_gpt2(os.path.join(work, "gpt2"))
    write("vocab_merges", "gpt2_small", vocab + "\0" + merges + "\0" + text)
    write("vocab_merges", "tiny", '{"a":0,"b":1,"ab":2,"Ġ":3}\0#version: 0.2\na b\n\0ab ab')

    py = "/usr/bin/python3"
    conv = os.path.join(ROOT, "tools", "tokenizer_parity")
    subprocess.run([py, os.path.join(conv, "gpt2_tokenizer_json.py"), os.path.join(work, "gpt2"),
                    os.path.join(work, "gpt2_json")], check=True)
    with open(os.path.join(work, "gpt2_json", "tokenizer.json"), encoding="utf-8") as f:
        gpt2_json = f.read()
    write("tokenizer_json", "gpt2_bytelevel", gpt2_json + "\0" + text)

    model = train_sp(os.path.join(work, "sp_bpe"), "bpe", 300)
    write("tokenizer_model", "llama_style_bpe", model)
    write("tokenizer_model", "unigram", train_sp(os.path.join(work, "sp_uni"), "unigram", 200))
    subprocess.run([py, os.path.join(conv, "sp_model_to_tokenizer_json.py"),
                    os.path.join(work, "sp_bpe.model"), os.path.join(work, "sp_json")],
                   check=True)
    with open(os.path.join(work, "sp_json", "tokenizer.json"), encoding="utf-8") as f:
        sp_json = f.read()
    with open(os.path.join(work, "sp_json", "tokenizer_config.json"), encoding="utf-8") as f:
        sp_config = f.read()
    write("tokenizer_json", "sentencepiece_bpe", sp_json + "\0" + text + "\0" + sp_config)

    # T5-style Unigram with precompiled rules, as spiece.model and as tokenizer.json: they reach
    # the rules' double-array reader, the normalizer and the Viterbi.
    uni_model = train_sp_unigram_with_rules(work)
    with open(uni_model, "rb") as f:
        write("tokenizer_model", "unigram_rules", f.read())
    subprocess.run([py, os.path.join(conv, "sp_unigram_to_tokenizer_json.py"), uni_model,
                    os.path.join(work, "uni_json")], check=True)
    with open(os.path.join(work, "uni_json", "tokenizer.json"), encoding="utf-8") as f:
        uni_json = f.read()
    with open(os.path.join(work, "uni_json", "tokenizer_config.json"), encoding="utf-8") as f:
        uni_config = f.read()
    uni_text = "\ufb01ne \uff21 \u2460\u200bhttp\tx</s><extra_id_0> \U0001f642"
    write("tokenizer_json", "unigram_precompiled", uni_json + "\0" + uni_text + "\0" + uni_config)


# --- RPC requests (protobuf wire format by hand: no generated Python code is needed) -----------

def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def vi(field, v):
    return varint(field << 3) + varint(v)


def ld(field, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return varint(field << 3 | 2) + varint(len(data)) + data


def dbl(field, v):
    return varint(field << 3 | 1) + struct.pack("<d", v)


SEP = b"\xc0\xc1"  # rpc_fuzzer.cc splits client streams here
METHODS = ["CreateTask", "GetTask", "ListTasks", "DeleteTask", "Classify", "StreamClassify",
           "Score", "Generate", "GetServerInfo"]
TASK = "fuzz-task"  # the task rpc_fuzzer.cc creates at start


def rpc(name, method, *messages):
    write("rpc", name, bytes([METHODS.index(method)]) + SEP.join(messages))


def demo(text, label=None, label_index=None, fields=None):
    out = ld(1, text)
    for k, v in (fields or {}).items():
        out += ld(2, ld(1, k) + ld(2, v))
    if label is not None:
        out += ld(3, label)
    if label_index is not None:
        out += vi(4, label_index)
    return out


def spec(template="Review: {text}\nAnswer:", labels=("bad", "good"), **extra):
    out = ld(1, template) + b"".join(ld(4, l) for l in labels) + vi(6, extra.get("group", 64))
    if "answer" in extra:
        out += ld(2, extra["answer"])
    if "separator" in extra:
        out += ld(3, extra["separator"])
    for field, key in ((7, "alignment"), (8, "mode"), (10, "long"), (11, "calibrate"),
                       (13, "kv_dtype"), (14, "max_query"), (15, "max_answer")):
        if key in extra:
            out += vi(field, extra[key])
    if "rescale" in extra:
        out += dbl(9, extra["rescale"])
    return out


def inp(text, fields=None):
    out = ld(1, text)
    for k, v in (fields or {}).items():
        out += ld(2, ld(1, k) + ld(2, v))
    return out


def rpc_seeds():
    demos = [demo("a joy to watch", "good"), demo("dull and long", "bad"),
             demo("witty and warm", label_index=1), demo("a mess", label_index=0)]
    rpc("create_two_messages", "CreateTask",
        ld(1, "t2") + ld(2, spec()) + b"".join(ld(4, d) for d in demos[:2]),
        b"".join(ld(4, d) for d in demos[2:]))
    rpc("create_parallel_calibrated", "CreateTask",
        ld(1, "t3") + ld(2, spec("{title}: {text} =", ("no", "yes"), mode=3, calibrate=1,
                                 alignment=2, kv_dtype=1, answer=" {label}", separator="\n\n"))
        + ld(4, demo("", "yes", fields={"title": "T", "text": "fine"})))
    rpc("create_replace_seed", "CreateTask",
        ld(1, TASK) + vi(3, 1) + ld(2, spec(group=16, alignment=3, long=2, rescale=1.5))
        + b"".join(ld(4, d) for d in demos))
    rpc("create_bad_utf8_second", "CreateTask", ld(1, "t4") + ld(2, spec()) + ld(4, demos[0]),
        ld(4, ld(1, b"\xff\xfe") + ld(3, "bad")))
    rpc("get", "GetTask", ld(1, TASK))
    rpc("get_missing", "GetTask", ld(1, "no-such-task"))
    rpc("list", "ListTasks", vi(1, 1))
    rpc("list_token", "ListTasks", vi(1, 5) + ld(2, "fuzz"))
    rpc("delete_missing", "DeleteTask", ld(1, "no-such-task"))
    rpc("delete_seed", "DeleteTask", ld(1, TASK))
    rpc("classify", "Classify", ld(1, TASK) + ld(2, inp("a great film")) + ld(4, "r1"))
    rpc("classify_options", "Classify",
        ld(1, TASK) + ld(2, inp("bad")) + ld(2, inp("", {"text": "ok"}))
        + ld(3, vi(1, 1) + dbl(2, 2.0)))
    rpc("classify_parallel", "Classify", ld(1, TASK) + ld(2, inp("so so")) + ld(3, vi(1, 3)))
    rpc("stream_classify", "StreamClassify",
        ld(1, TASK) + ld(2, inp("loved it")) + ld(4, "a"),
        ld(1, TASK) + ld(2, inp("hated it")) + ld(4, "b"))
    rpc("score", "Score",
        ld(1, TASK) + ld(2, ld(1, inp("a fine film")) + ld(2, " yes") + ld(2, " no")))
    rpc("generate", "Generate", ld(1, TASK) + ld(2, inp("a fine film")) + ld(3, vi(2, 3)))
    rpc("generate_beam", "Generate",
        ld(1, TASK) + ld(2, inp("ok")) + ld(3, vi(1, 2) + vi(2, 2) + vi(3, 2) + dbl(4, 1.0)
                                            + ld(5, "\n") + vi(6, 1) + ld(7, vi(1, 1))))
    rpc("server_info", "GetServerInfo", b"")


# --- metrics_http ----------------------------------------------------------------------------

def metrics_http_seeds():
    """Raw HTTP requests for the metrics port: scrapes, other paths, methods, bodies, pipelining."""
    seeds = {
        "scrape": "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\n"
                  "User-Agent: Prometheus/2.42.0\r\nAccept: text/plain;version=0.0.4\r\n"
                  "Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
        "root_http10": "GET / HTTP/1.0\r\n\r\n",
        "favicon": "GET /favicon.ico HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
        "head": "HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
        "post_body": "POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nbody",
        "chunked": "POST /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "4\r\nbody\r\n0\r\n\r\n",
        "range": "GET /metrics HTTP/1.1\r\nRange: bytes=0-10,20-\r\n\r\n",
        "pipelined": "GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /metrics?y=1 HTTP/1.1\r\n"
                     "Host: a\r\nConnection: close\r\n\r\n",
        "percent": "GET /%2e%2e/%00%ff?a=%zz HTTP/1.1\r\n\r\n",
        "options_star": "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    }
    for name, text in seeds.items():
        write("metrics_http", name, text)


def main():
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    safetensors_seeds()
    config_seeds()
    rpc_seeds()
    metrics_http_seeds()
    # A fixed work directory: SentencePiece records the model's path prefix in the model.
    work = os.path.join(tempfile.gettempdir(), "manyshot_fuzz_seeds")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        tokenizer_seeds(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for target in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, target))
        size = sum(os.path.getsize(os.path.join(CORPUS, target, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
