"""Beam search exactly as docs/structured_prompting.md § Generation (stop_at_eos, no stop
strings), over any model: the decoder-only reference (structured.Scorer.beam) and T5's
(t5_reference.T5Model.beam) both call beam_search with their own next-token distributions.
"""

import numpy as np


def beam_search(next_logprobs, beam_width, length_penalty, max_new_tokens, eos_id):
    """next_logprobs(tokens) -> natural-log distribution [V] of the token after the generated
    `tokens` (a list; empty for the first token).

    Returns dict(tokens (without eos), sum_logprob, score, finish, finished=[all finished
    hypotheses in finishing order], margin): margin is the smallest gap between sums that the
    search ranked against each other (adjacent pairs among each step's 2k + 1 best) and between
    the best finished score and the others, so a golden can refuse near-ties that float32
    rounding could reorder."""
    k = beam_width
    live = [([], 0.0)]
    finished = []  # (tokens incl. eos when finished at eos, sum, score, reason)
    margin = np.inf
    for step in range(1, max_new_tokens + 1):
        pairs = []
        for b, (toks, s) in enumerate(live):
            lp = next_logprobs(toks)
            # Only the 2k + 1 best tokens of a beam can be among the 2k + 1 best pairs.
            top = np.argsort(-lp, kind="stable")[: 2 * k + 1]
            for tok in top:
                pairs.append((s + float(lp[tok]), b, int(tok)))
        pairs.sort(key=lambda x: (-x[0], x[1], x[2]))
        ranked = [p[0] for p in pairs[: 2 * k + 1]]
        if len(ranked) > 1:
            margin = min(margin, float(-np.diff(ranked).max()))
        pairs = pairs[: 2 * k]
        new_live = []
        for s, b, tok in pairs:
            if len(new_live) == k:
                break  # the next live beams are complete; later pairs are not taken
            toks = live[b][0] + [tok]
            if tok == eos_id:
                finished.append((toks, s, s / len(toks) ** length_penalty, "EOS"))
            else:
                new_live.append((toks, s))
        live = new_live
        if len(finished) >= k or not live:
            break
        if step == max_new_tokens:
            for toks, s in live:
                finished.append((toks, s, s / len(toks) ** length_penalty, "MAX_TOKENS"))
    best = None
    for hyp in finished:  # strict > keeps the earliest finished on ties
        if best is None or hyp[2] > best[2]:
            best = hyp
    for hyp in finished:
        if hyp is not best:
            margin = min(margin, best[2] - hyp[2])
    toks, s, score, reason = best
    if reason == "EOS":
        toks = toks[:-1]
    return dict(tokens=toks, sum_logprob=s, score=score, finish=reason,
                finished=[dict(tokens=h[0], sum_logprob=h[1], score=h[2], finish=h[3])
                          for h in finished], margin=margin)
