"""SST-2 k-shot accuracy the way `manyshot eval --preset=sst2_cbu --modes=conventional` measures
it, for train.py's end-of-run numbers (numpy only; the model is a callback).

Prompt of a test input, as the server's CONVENTIONAL mode builds it (engine/prompting/groups.cc
BuildConventionalWindow, context_encoder.cc EncodeWindow, icl_task.cc):

    [bos] demo_1 .. demo_u  Encode("Sentence: X\nLabel:")      -> compare the next-token logits
                                                                  of " Negative" and " Positive"

where demo_i = Encode("Sentence: D_i\nLabel:") + Encode(" WORD") + Encode("\n\n") (the same ids
as Encode of the whole demonstration: prepare_data.py checks it) and the demonstrations are the
first k of a seeded permutation of the training split, taken while they fit the group length
minus one (n_positions - max_query_tokens - max_answer_tokens - 1 = 863 tokens at 1024): `used`
says how many did. Accuracy is the mean over the test inputs; mean and sample standard deviation
(ddof 1) over the samples, as manyshot eval reports them. The permutation differs from manyshot
eval's (std::mt19937_64), so the figures are the same protocol, not the same draws.
"""

import numpy as np

import icl_data


def demonstration(input_ids, word_id, sep_ids):
    return np.concatenate([input_ids, [word_id], sep_ids]).astype(np.int64)


def conventional_prompts(data, shots, sample_seed, word_ids, n_positions=1024,
                         max_query_tokens=128, max_answer_tokens=32,
                         test_split=icl_data.SST2_DEV, test_limit=0):
    """(prompts [int64 arrays], gold classes, demonstrations used)."""
    train = data.sst2(icl_data.SST2_TRAIN)
    test = data.sst2(test_split)
    if test_limit:
        order = np.random.default_rng([1, 99]).permutation(len(test))[:test_limit]
        test = [test[i] for i in order]
    capacity = n_positions - max_query_tokens - max_answer_tokens - 1
    window, used = [], 0
    if shots:
        for i in np.random.default_rng([sample_seed, 2]).permutation(len(train))[:shots]:
            ids, cls = train[i]
            demo = demonstration(ids, word_ids[cls], data.sep_ids)
            if sum(len(w) for w in window) + len(demo) > capacity:
                break
            window.append(demo)
            used += 1
    prefix = np.concatenate([[data.bos]] + window).astype(np.int64)
    prompts, gold = [], []
    for ids, cls in test:
        if len(ids) > max_query_tokens:
            raise ValueError(f"an SST-2 input has {len(ids)} tokens > max_query_tokens")
        prompts.append(np.concatenate([prefix, ids]))
        gold.append(cls)
    return prompts, np.asarray(gold, dtype=np.int64), used


def evaluate(data, next_logits, shots_list, samples, word_ids=None, flipped=False, **kw):
    """next_logits(prompts, ids) -> float array [len(prompts), len(ids)]: each prompt's next-token
    logits at `ids`. flipped: demonstrations carry the other class's word (class 0 -> word 1);
    accuracy then counts agreement with the flipped mapping, i.e. how far the model follows the
    demonstrations rather than a prior about the words."""
    word_ids = list(word_ids or data.sst2_word_ids())
    demo_words = word_ids[::-1] if flipped else word_ids
    results = {}
    majority = None
    for k in shots_list:
        accs, used_list = [], []
        for s in range(1, samples + 1):
            prompts, gold, used = conventional_prompts(data, k, s, demo_words, **kw)
            logits = np.asarray(next_logits(prompts, demo_words))
            accs.append(float(np.mean(np.argmax(logits, axis=1) == gold)))
            used_list.append(used)
            if majority is None:
                majority = float(max(np.mean(gold == 0), np.mean(gold == 1)))
            if k == 0:
                break  # zero shots: every sample is the same prompt
        results[str(k)] = {
            "per_sample": accs, "used": used_list, "mean": float(np.mean(accs)),
            "std": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0}
    return {"majority_rate": majority, "flipped": flipped, "by_shots": results}


def format_table(title, result):
    lines = [f"{title} (majority class {result['majority_rate']:.4f})",
             "shots   used  accuracy     std  per sample"]
    for k, r in result["by_shots"].items():
        lines.append(f"{int(k):5d} {np.mean(r['used']):6.1f}    {r['mean']:.4f}  {r['std']:.4f}  "
                     + " ".join(f"{a:.4f}" for a in r["per_sample"]))
    return "\n".join(lines)
