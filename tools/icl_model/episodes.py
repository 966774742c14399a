"""Meta-ICL episodes from the prepared data (numpy only, so it is unit-tested on the CPU machines;
train.py feeds its batches to torch).

An episode is one training sequence laid out exactly as the server's CONVENTIONAL prompt:

    [bos] demo_1 demo_2 ... demo_n [bos padding]

where demo_i = PREFIX " TEXT" CUE " WORD" "\n\n" (a one-field dataset; a several-field dataset has
its rendered input instead of PREFIX " TEXT" CUE), each demonstration's ids concatenated from
pieces as prepare_data.py explains. Per episode: one dataset; 2..K of its classes (all of them
when it has two); for each chosen class a different label word drawn from the pool, so the word of
a class changes from episode to episode and can only be read from the demonstrations; the
dataset's own template or (with probability 1 - own_template_prob) one from the pool. Classes are
drawn uniformly per demonstration and whole demonstrations are packed while they fit ctx_len + 1
tokens (inputs are tokens[:-1], targets tokens[1:]). The loss is on the label words (every
demonstration's, so one sequence trains 0, 1, 2, ... shots) plus, with a small weight, a random
subset of the other real tokens.
"""

from dataclasses import dataclass

import numpy as np

import icl_data


@dataclass
class Episode:
    tokens: np.ndarray        # int64 [ctx_len + 1]: bos, demonstrations, bos padding
    length: int               # real tokens (bos included)
    label_pos: np.ndarray     # int64 [n_demos]: index in tokens of each demonstration's label
    label_col: np.ndarray     # int64 [n_demos]: which of label_ids (the gold column)
    label_ids: np.ndarray     # int64 [n_classes]: the episode's label word of each chosen class
    classes: np.ndarray       # int64 [n_classes]: the dataset's class of each column
    dataset: int
    template: int             # index into data.templates; -1 for a several-field dataset
    rows: np.ndarray          # int64 [n_demos]: the example row of each demonstration

    def loss_mask(self):
        """bool [ctx_len] over targets (tokens[1:]): True exactly where the target is a label."""
        mask = np.zeros(len(self.tokens) - 1, dtype=bool)
        mask[self.label_pos - 1] = True
        return mask


class EpisodeSampler:
    def __init__(self, data, split=icl_data.TRAIN, ctx_len=1024, own_template_prob=0.5,
                 weighting="sqrt", weights=None):
        """weights: {dataset name: weight} overriding `weighting` ("sqrt" of the example count,
        "size", or "uniform")."""
        self.data = data
        self.split = split
        self.ctx_len = ctx_len
        self.own_template_prob = own_template_prob
        self.by_class = data.by_class[split]
        names = [info["name"] for info in data.datasets]
        usable = [sum(1 for m in self.by_class[d] if len(m)) >= 2 for d in range(len(names))]
        sizes = np.asarray([sum(len(m) for m in self.by_class[d]) for d in range(len(names))],
                           dtype=np.float64)
        if weights:
            unknown = set(weights) - set(names)
            if unknown:
                raise ValueError(f"unknown datasets in weights: {sorted(unknown)}")
            w = np.asarray([float(weights.get(n, 0.0)) for n in names])
        elif weighting == "sqrt":
            w = np.sqrt(sizes)
        elif weighting == "size":
            w = sizes.copy()
        elif weighting == "uniform":
            w = np.ones(len(names))
        else:
            raise ValueError(f"unknown weighting {weighting}")
        w = np.where(usable, w, 0.0)
        if w.sum() <= 0:
            raise ValueError("no dataset has two classes with examples in this split")
        self.weights = w / w.sum()
        self.names = names

    def demonstration(self, d, row, template, label_id):
        piece = self.data.piece(row)
        parts = [piece, [label_id], self.data.sep_ids]
        if template >= 0:
            prefix, cue = self.data.templates[template]
            parts = [prefix, piece, cue, [label_id], self.data.sep_ids]
        return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])

    def episode(self, rng):
        data = self.data
        d = int(rng.choice(len(self.weights), p=self.weights))
        avail = np.asarray([c for c, m in enumerate(self.by_class[d]) if len(m)], dtype=np.int64)
        n = len(avail) if len(avail) == 2 else int(rng.integers(2, len(avail) + 1))
        classes = np.sort(rng.choice(avail, size=n, replace=False))
        label_ids = data.pool_ids[rng.choice(len(data.pool_ids), size=n, replace=False)]
        template = -1
        if data.is_free(d):
            own = data.datasets[d]["own_template"]
            template = own if rng.random() < self.own_template_prob else \
                int(rng.integers(len(data.templates)))
        limit = self.ctx_len + 1
        parts = [np.asarray([data.bos], dtype=np.int64)]
        length = 1
        label_pos, label_col, rows = [], [], []
        misses = 0
        sep_len = len(data.sep_ids)
        while misses < 3:  # a few tries with other examples before the episode is full
            col = int(rng.integers(n))
            members = self.by_class[d][classes[col]]
            row = int(members[rng.integers(len(members))])
            demo = self.demonstration(d, row, template, label_ids[col])
            if length + len(demo) > limit:
                misses += 1
                continue
            label_pos.append(length + len(demo) - sep_len - 1)
            label_col.append(col)
            rows.append(row)
            parts.append(demo)
            length += len(demo)
        tokens = np.full(limit, data.bos, dtype=np.int64)
        tokens[:length] = np.concatenate(parts)
        return Episode(tokens=tokens, length=length, label_pos=np.asarray(label_pos, np.int64),
                       label_col=np.asarray(label_col, np.int64), label_ids=label_ids,
                       classes=classes, dataset=d, template=template,
                       rows=np.asarray(rows, np.int64))

    def batch(self, rng, batch_size, lm_positions=64, episodes=None):
        """Arrays for one step. Flat indices address inputs.reshape(-1) (b * ctx_len + t).

        inputs, targets   int64 [B, ctx_len]
        label_index       int64 [L]   positions whose target is a label word
        label_target      int64 [L]
        label_cands       int64 [L, C] the episode's label words (-1 padded): restricted accuracy
        label_gold        int64 [L]   column of the target in label_cands
        label_shots       int64 [L]   demonstrations before this one in its episode
        label_dataset     int64 [L]
        lm_index, lm_target  int64 [M] other real positions, lm_positions per episode at most
        """
        eps = episodes if episodes is not None else [self.episode(rng) for _ in range(batch_size)]
        T = self.ctx_len
        tokens = np.stack([e.tokens for e in eps])
        cmax = max(len(e.label_ids) for e in eps)
        li, lt, lc, lg, ls, ld, mi, mt = [], [], [], [], [], [], [], []
        for b, e in enumerate(eps):
            t_label = e.label_pos - 1
            li.append(b * T + t_label)
            lt.append(e.tokens[e.label_pos])
            cands = np.full((len(t_label), cmax), -1, dtype=np.int64)
            cands[:, :len(e.label_ids)] = e.label_ids
            lc.append(cands)
            lg.append(e.label_col)
            ls.append(np.arange(len(t_label), dtype=np.int64))
            ld.append(np.full(len(t_label), e.dataset, dtype=np.int64))
            if lm_positions > 0:
                other = np.ones(e.length - 1, dtype=bool)  # targets 0..length-2 are real tokens
                other[t_label] = False
                pool = np.flatnonzero(other)
                k = min(lm_positions, len(pool))
                pick = np.sort(rng.choice(pool, size=k, replace=False)) if k else pool[:0]
                mi.append(b * T + pick)
                mt.append(e.tokens[pick + 1])
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        return {
            "inputs": tokens[:, :-1], "targets": tokens[:, 1:],
            "label_index": cat(li), "label_target": cat(lt), "label_cands": np.concatenate(lc),
            "label_gold": cat(lg), "label_shots": cat(ls), "label_dataset": cat(ld),
            "lm_index": cat(mi), "lm_target": cat(mt),
        }


def heldout_episodes(data, ctx_len, count, seed, own_template_prob=0.5):
    """A fixed list of held-out episodes (built once, scored at every evaluation)."""
    sampler = EpisodeSampler(data, icl_data.HELDOUT, ctx_len, own_template_prob, "uniform")
    rng = np.random.default_rng(seed)
    return sampler, [sampler.episode(rng) for _ in range(count)]


def restricted_accuracy(label_logits_at_cands, gold):
    """Accuracy of argmax over each row's candidate logits (-inf where padded)."""
    return float(np.mean(np.argmax(label_logits_at_cands, axis=1) == gold)) if len(gold) else 0.0
