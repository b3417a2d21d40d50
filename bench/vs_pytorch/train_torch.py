#!/usr/bin/python3
"""Train the PyTorch twin of a pntrain model (model.py) and report its throughput as one JSON line.

    /usr/bin/python3 bench/vs_pytorch/train_torch.py --config configs/ptb_small.ini \
        --norm layer --ranks 2 --threads 1 --updates 20 --warmup 5 --vocab 67 [--data DIR]
    /usr/bin/python3 bench/vs_pytorch/train_torch.py --config configs/iwslt_small.ini \
        --data ../shared/data/iwslt14-de-en --ranks 1 --updates 20 --warmup 5 [--init F]

The config's arch picks the model: transformer_lm (the default) trains TransformerLM on
samples of tokens_per_sample tokens, transformer trains TransformerMT (the encoder-decoder) on
padded batches of sentence pairs, as trainer/model_task.cpp's TranslationTask builds them: the
training split (train-subset) of --data, or of the config's data key (pntrain's text layout,
<subset>.<lang>, or fairseq-preprocess's binarized one), is sorted by target then source
length and cut into update batches of at most max_tokens x ranks x update_freq tokens counting
the padding (longest side x sentences); the updates visit them in pntrain's seeded order (its
mt19937_64 shuffle, so both take the same batches) and each update's batch is cut into
update_freq x ranks contiguous pieces. A translation update's tokens are its target tokens
(padding excluded), as pntrain counts them. The per-site norm kinds are the config's
(encoder-norm-self ... decoder-norm-final); a --norm flag sets every site not given as a flag
too, as pntrain's --norm does. --init FILE.safetensors (a `pn export` of a translation checkpoint)
starts from its parameters instead of a fresh init, so that pntrain's and the twin's losses
can be compared update by update.

Sizes and optimisation settings come from the pntrain INI config (--config), overridden by
the flags here. Each update: update_freq micro-steps of max_tokens tokens per rank (samples of
tokens_per_sample), loss = label-smoothed CE summed over tokens, backward (at R > 1 through
DistributedDataParallel over gloo: bucketed gradient all-reduces overlapped with the backward of
the last micro-step); then the all-reduce of the token count, gradient / tokens, AdamW step
(decoupled weight decay, as pntrain's adam), inverse_sqrt learning rate. At R > 1 the ranks are processes
started by torch.multiprocessing.spawn (MASTER_ADDR=127.0.0.1, a free port).

On a GPU (--device cuda, one rank) the strongest configuration is on offer: --compile
(torch.compile of the model), --precision bf16 (autocast, fp32 master weights), tf32, fused
AdamW where PyTorch has it, and PyTorch's fused attention (scaled_dot_product_attention, flash
where it applies) whenever PyTorch has it; the update's wall time ends with a device
synchronisation, and the loss sums are read once per update, as pntrain does, after the
optimiser's step (the token count is known on the host, so the step's launches queue behind the
backward instead of waiting for it); the batches are copied from pinned host memory. The
plain PyTorch model that the twin is measured against is plain_gpt.py.

Output (rank 0, stdout, last line): {"impl":"pytorch","norm":..,"ranks":..,"threads":..,
"tokens_per_update":..,"tokens_per_s":median over updates W+1..W+N (tokens of all ranks over
rank 0's wall time of the update), "peak_rss_mb":[per rank], "loss":[per measured update],..}
"""
import argparse
import contextlib
import json
import os
import resource
import socket
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pn_config import learning_rate, read_ini  # noqa: E402
from model import (NORM_SITES, LMWithLoss, TransformerLM, TransformerMT, label_smoothed_loss,  # noqa: E402
                   load_pn_export)

# pntrain's defaults (trainer/options.h) for the keys we use.
DEFAULTS = {
    "tokens-per-sample": 64, "max-tokens": 2048, "update-freq": 1, "seed": 1,
    "decoder-layers": 2, "decoder-embed-dim": 128, "decoder-attention-heads": 4,
    "decoder-ffn-embed-dim": 512, "dropout": 0.1, "norm": "layer", "norm-eps": 1e-5,
    "norm-alpha": 0.9, "pn-alpha-fwd": 0.9, "pn-alpha-bkw": 0.9, "pn-warmup": -1,
    "lr": 5e-4, "adam-eps": 1e-8, "adam-betas-1": 0.9, "adam-betas-2": 0.98,
    "weight-decay": 0.0, "label-smoothing": 0.1, "lr-scheduler": "inverse_sqrt",
    "warmup-updates": 100, "warmup-init-lr": 0.0, "clip-norm": 0.0,
    # translation (arch = transformer)
    "arch": "transformer_lm", "source-lang": "de", "target-lang": "en", "train-subset": "train",
    "share-all-embeddings": False, "encoder-layers": 2, "encoder-embed-dim": 128,
    "encoder-attention-heads": 4, "encoder-ffn-embed-dim": 512, "attention-dropout": 0.0,
}
DEFAULTS.update({site: "layer" for site in NORM_SITES})


def to_bool(text):
    """Boost.Program_options' spellings of a switch's value."""
    return str(text).strip().lower() in ("1", "true", "yes", "on")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--config", help="pntrain INI config (sizes, batch, optimiser)")
    ap.add_argument("--data", default=None, help="corpus directory (LM: train.txt or "
                    "ptb.train.txt, default random tokens; translation: <subset>.<lang> or "
                    "fairseq's data-bin, default the config's data key)")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary size (random tokens: "
                    "required; with --data: checked against the corpus' (target) vocabulary)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="threads per rank (0: cores / ranks)")
    ap.add_argument("--updates", type=int, default=20, help="measured updates N")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured warm-up updates W")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                    help="bf16: autocast with fp32 master weights (CPU or GPU); tf32: GPU "
                    "matmuls in tf32")
    ap.add_argument("--pad-vocab", type=int, default=None,
                    help="LM: the embedding's rows rounded up to a multiple of this, the padded "
                    "logits -inf (default 64 on a GPU, 1 on the CPU)")
    ap.add_argument("--init", default=None, help="translation: start from the parameters of "
                    "this `pn export` (.safetensors) instead of a fresh init")
    # overrides of the config (pntrain's flag names)
    for key in DEFAULTS:
        ap.add_argument("--" + key, dest=key.replace("-", "_"), default=None)
    args = ap.parse_args(argv)
    cfg = dict(DEFAULTS)
    ini = read_ini(args.config) if args.config else {}
    cfg.update(ini)
    given = set(ini)  # keys set by the config or a flag (pntrain's --norm needs to know)
    flags = set()      # ... by a flag: a --norm flag wins over the config's sites
    for key in DEFAULTS:
        v = getattr(args, key.replace("-", "_"))
        if v is not None:
            cfg[key] = v
            given.add(key)
            flags.add(key)
    for key, default in DEFAULTS.items():  # types of the defaults
        if isinstance(default, bool):
            cfg[key] = to_bool(cfg[key])
        else:
            cfg[key] = type(default)(cfg[key]) if not isinstance(default, float) \
                else float(cfg[key])
    args.given, args.flags = given, flags
    if cfg["arch"] not in ("transformer_lm", "transformer"):
        ap.error("arch '%s' has no twin (transformer_lm, transformer)" % cfg["arch"])
    if cfg["arch"] == "transformer" and args.data is None:
        args.data = ini.get("data")  # the config's corpus, as pntrain reads it
        if args.data is None:
            ap.error("a translation config needs --data (or a data key)")
    if args.init and cfg["arch"] != "transformer":
        ap.error("--init loads a translation model's export")
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // args.ranks)
    if args.pad_vocab is None:
        args.pad_vocab = 64 if args.device == "cuda" else 1
    if args.pad_vocab < 1:
        ap.error("--pad-vocab must be positive")
    if args.device == "cuda" and args.ranks != 1:
        ap.error("--device cuda runs one rank (one GPU)")
    if args.device == "cpu" and args.precision == "tf32":
        ap.error("--precision tf32 needs --device cuda")
    if args.compile and not hasattr(torch, "compile"):
        ap.error("--compile needs PyTorch 2 (this is %s)" % torch.__version__)
    return args, cfg


# ---------------------------------------------------------------- data

def load_stream(data_dir):
    """Token stream of the training split, vocabulary as trainer/data.cpp: <pad> <eos> <unk>,
    then words by descending frequency (ties in byte order); <eos> after every line."""
    names = ["train.txt", "ptb.train.txt", "wiki.train.tokens", "train"]
    path = next((os.path.join(data_dir, n) for n in names
                 if os.path.isfile(os.path.join(data_dir, n))), None)
    if path is None:
        raise SystemExit(f"no train file in '{data_dir}'")
    lines = []
    freq = {}
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            words = line.split()
            if words:
                lines.append(words)
                for w in words:
                    freq[w] = freq.get(w, 0) + 1
    for w in ("<eos>", "<pad>", "<unk>"):
        freq.pop(w, None)
    order = sorted(freq.items(), key=lambda kv: kv[0].encode("utf-8", "surrogateescape"))
    order.sort(key=lambda kv: -kv[1])  # stable: ties stay in byte order (std::map)
    index = {w: i + 3 for i, (w, _) in enumerate(order)}
    stream = []
    for words in lines:
        stream.extend(index.get(w, 2) for w in words)
        stream.append(1)
    return np.asarray(stream, dtype=np.int64), len(order) + 3


class Samples:
    """Samples of tokens_per_sample inputs and their next tokens, a permutation per epoch."""

    def __init__(self, stream, tps, seed):
        self.stream, self.tps = stream, tps
        self.count = (len(stream) - 1) // tps
        self.seed, self.epoch, self.perm = seed, -1, None

    def batch(self, ids):
        idx = np.asarray(ids)[:, None] * self.tps + np.arange(self.tps)[None, :]
        return torch.from_numpy(self.stream[idx]), torch.from_numpy(self.stream[idx + 1])

    def sample(self, g):
        e = g // self.count
        if e != self.epoch:
            self.perm = np.random.default_rng((self.seed, e)).permutation(self.count)
            self.epoch = e
        return int(self.perm[g % self.count])


# ---------------------------------------------------------------- translation data

def read_lines(path):
    """trainer/translation_data.cpp read_lines: lines as bytes, a trailing '\r' dropped (words
    are then split on ASCII whitespace, as C++ streams split them)."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # std::getline yields no line after the final newline
    return [l[:-1] if l.endswith(b"\r") else l for l in lines]


def build_vocab(sides):
    """build_vocab: <pad> <eos> <unk>, then the words of `sides` (lists of lines) by falling
    frequency, ties in byte order. Returns ({word: id}, size)."""
    freq = {}
    for lines in sides:
        for line in lines:
            for w in line.split():
                freq[w] = freq.get(w, 0) + 1
    for w in (b"<pad>", b"<eos>", b"<unk>"):
        freq.pop(w, None)
    order = sorted(freq.items())  # byte order (std::map)
    order.sort(key=lambda kv: -kv[1])  # stable
    return {w: i + 3 for i, (w, _) in enumerate(order)}, len(order) + 3


def encode_lines(lines, index):
    """encode_line: word ids (unknown: <unk> = 2), then <eos> = 1."""
    return [np.asarray([index.get(w, 2) for w in l.split()] + [1], dtype=np.int64)
            for l in lines]


FAIRSEQ_DTYPES = {1: "<u1", 2: "<i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2", 9: "<u4",
                  10: "<u8"}


def read_fairseq_items(prefix):
    """trainer/fairseq_data.h: the sentences of prefix.idx/.bin (fairseq's mmap indexed
    dataset), fairseq id f read as pntrain id f - 1 (<s> = 0 as <unk>)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    if idx[:9] != b"MMIDIDX\x00\x00":
        raise SystemExit("'%s.idx' is not a fairseq mmap index" % prefix)
    dtype = np.dtype(FAIRSEQ_DTYPES[idx[17]])
    n = struct.unpack("<Q", idx[18:26])[0]
    sizes = np.frombuffer(idx, "<i4", n, 34)
    pointers = np.frombuffer(idx, "<i8", n, 34 + 4 * n)
    with open(prefix + ".bin", "rb") as f:
        raw = f.read()
    items = []
    for size, ptr in zip(sizes, pointers):
        t = np.frombuffer(raw, dtype, int(size), int(ptr)).astype(np.int64)
        items.append(np.where(t == 0, 2, t - 1))
    return items


def fairseq_dict_words(path):
    """The words of a fairseq dict.<lang>.txt ("word count [#fairseq:overwrite]" lines)."""
    flag = b" #fairseq:overwrite"
    lines = [l[:-len(flag)] if l.endswith(flag) else l for l in read_lines(path) if l]
    return [l.rsplit(b" ", 1)[0] for l in lines]


def load_parallel(data_dir, src_lang, tgt_lang, subset, joint):
    """The training split as pntrain's load_parallel_corpus reads it: fairseq-preprocess's
    binarized layout when data_dir holds dict.<src>.txt and <subset>.<src>-<tgt>.<src>.idx, else
    the text files <subset>.<lang> with pntrain's vocabulary (joint: from both sides).
    Returns (source sentences, target sentences, source vocabulary, target vocabulary)."""
    pair = "%s-%s" % (src_lang, tgt_lang)
    if os.path.isfile(os.path.join(data_dir, "dict.%s.txt" % src_lang)) and os.path.isfile(
            os.path.join(data_dir, "%s.%s.%s.idx" % (subset, pair, src_lang))):
        words = [fairseq_dict_words(os.path.join(data_dir, "dict.%s.txt" % l))
                 for l in (src_lang, tgt_lang)]
        if joint and words[0] != words[1]:
            raise SystemExit("shared embeddings need one joint dictionary")
        sides = [read_fairseq_items(os.path.join(data_dir, "%s.%s.%s" % (subset, pair, l)))
                 for l in (src_lang, tgt_lang)]
        return sides[0], sides[1], len(words[0]) + 3, len(words[1]) + 3
    text = []
    for lang in (src_lang, tgt_lang):
        path = os.path.join(data_dir, "%s.%s" % (subset, lang))
        if not os.path.isfile(path):
            raise SystemExit("missing '%s'" % path)
        text.append(read_lines(path))
    if len(text[0]) != len(text[1]):
        raise SystemExit("the two sides of '%s' differ in lines" % subset)
    if joint:
        index, size = build_vocab(text)
        vocabs = [(index, size), (index, size)]
    else:
        vocabs = [build_vocab([t]) for t in text]
    src, tgt = (encode_lines(t, v[0]) for t, v in zip(text, vocabs))
    return src, tgt, vocabs[0][1], vocabs[1][1]


def length_batches(src, tgt, max_tokens):
    """translation_data.cpp length_batches: pairs sorted (stably) by target then source length,
    cut greedily so that longest side x sentences stays within max_tokens (a longer pair alone)."""
    order = sorted(range(len(src)), key=lambda i: (len(tgt[i]), len(src[i])))
    batches, cur, longest = [], [], 0
    for i in order:
        n = max(len(src[i]), len(tgt[i]))
        if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    return batches


class MT19937_64:
    """std::mt19937_64, so that the twin draws pntrain's permutations exactly."""
    N, M, MASK = 312, 156, (1 << 64) - 1

    def __init__(self, seed):
        mt = [seed & self.MASK]
        for i in range(1, self.N):
            mt.append((6364136223846793005 * (mt[-1] ^ (mt[-1] >> 62)) + i) & self.MASK)
        self.mt, self.i = mt, self.N

    def _twist(self):
        mt, N = self.mt, self.N
        for i in range(N):
            x = (mt[i] & 0xFFFFFFFF80000000) | (mt[(i + 1) % N] & 0x7FFFFFFF)
            mt[i] = mt[(i + self.M) % N] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
        self.i = 0

    def __call__(self):
        if self.i >= self.N:
            self._twist()
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return (y ^ (y >> 43)) & self.MASK


class SampleOrder:
    """trainer/data.cpp SampleOrder: epoch e a Fisher-Yates permutation drawn from
    mt19937_64(seed * 1000003 + e); global index g is epoch g / count, position g % count."""

    def __init__(self, count, seed):
        self.count, self.seed, self.epoch, self.perm = count, seed, -1, None

    def sample(self, g):
        e = g // self.count
        if e != self.epoch:
            perm = list(range(self.count))
            rng = MT19937_64((self.seed * 1000003 + e) & MT19937_64.MASK)
            for i in range(self.count - 1, 0, -1):
                j = rng() % (i + 1)
                perm[i], perm[j] = perm[j], perm[i]
            self.perm, self.epoch = perm, e
        return self.perm[g % self.count]


def batch_piece(batch, piece, pieces):
    """batch_piece: rank_share's contiguous piece of an update batch."""
    n = len(batch)
    return batch[n * piece // pieces:n * (piece + 1) // pieces]


def make_parallel_batch(src, tgt, ids):
    """make_parallel_batch: right-padded src [n, S], prev [n, T] (<eos>, then the target without
    its <eos>), tgt [n, T] and the masks (True = real token), as numpy arrays."""
    if not ids:
        raise SystemExit("a rank's piece of an update batch is empty: use fewer ranks")
    S = max(len(src[i]) for i in ids)
    T = max(len(tgt[i]) for i in ids)
    n = len(ids)
    s = np.zeros((n, S), np.int64)
    p = np.zeros((n, T), np.int64)
    t = np.zeros((n, T), np.int64)
    sm = np.zeros((n, S), bool)
    tm = np.zeros((n, T), bool)
    for r, i in enumerate(ids):
        a, b = src[i], tgt[i]
        s[r, :len(a)], sm[r, :len(a)] = a, True
        t[r, :len(b)], tm[r, :len(b)] = b, True
        p[r, 0], p[r, 1:len(b)] = 1, b[:-1]
    return s, sm, p, t, tm


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


# ---------------------------------------------------------------- training

def pn_warmup(cfg):
    """PN's warmup in training forwards: pn-warmup, else warmup-updates x micro-steps
    (trainer/options.cpp norm_options)."""
    return cfg["pn-warmup"] if cfg["pn-warmup"] >= 0 else cfg["warmup-updates"] * cfg["update-freq"]


class LmTask:
    """The language model: samples of tokens_per_sample tokens (SampleSet, rank_samples), from
    the corpus of --data or a pool of random tokens."""

    def __init__(self, args, cfg, rank, R):
        tps, max_tokens = cfg["tokens-per-sample"], cfg["max-tokens"]
        if max_tokens % tps:
            raise SystemExit("--max-tokens must be a multiple of --tokens-per-sample")
        self.ufreq, self.tps = cfg["update-freq"], tps
        self.micro_samples = max_tokens * R // tps  # samples per micro-batch over all ranks
        self.b0 = self.micro_samples * rank // R
        self.b1 = self.micro_samples * (rank + 1) // R
        self.data, self.eps = args.data, cfg["label-smoothing"]
        if args.data:
            stream, vocab = load_stream(args.data)
            if args.vocab and args.vocab != vocab:
                raise SystemExit(f"--vocab {args.vocab} but the corpus gives {vocab}")
            self.samples = Samples(stream, tps, cfg["seed"])
        else:
            if args.vocab <= 0:
                raise SystemExit("--vocab is required with random tokens")
            vocab = args.vocab
            # random tokens: a pool of micro-batches, cycled (ids 1..V-1, never <pad>)
            gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + rank)
            self.pool = [torch.randint(1, vocab, (self.b1 - self.b0, tps + 1), generator=gen)
                         for _ in range(4)]
        self.vocab, self.norm = vocab, args.norm
        torch.manual_seed(cfg["seed"])  # same init on every rank
        self.model = TransformerLM(vocab, cfg["decoder-layers"], cfg["decoder-embed-dim"],
                                   cfg["decoder-attention-heads"], cfg["decoder-ffn-embed-dim"],
                                   tps, cfg["dropout"], args.norm, cfg["norm-eps"],
                                   cfg["norm-alpha"], cfg["pn-alpha-fwd"], cfg["pn-alpha-bkw"],
                                   pn_warmup(cfg), args.pad_vocab)
        self.trained = LMWithLoss(self.model)  # what DDP and torch.compile wrap

    def to(self, dev):
        self.dev = dev
        self.model.to(dev)
        if self.data is None:
            self.pool = [p.to(dev) for p in self.pool]

    def micro_loss(self, forward, update, micro, autocast):
        """(loss sum, nll sum, tokens) of this rank's share of micro-step `micro`."""
        if self.data:
            g0 = (update * self.ufreq + micro) * self.micro_samples
            ids = [self.samples.sample(g0 + i) for i in range(self.b0, self.b1)]
            inp, tgt = self.samples.batch(ids)
            if self.dev.type == "cuda":  # a copy from pageable memory waits for the device
                inp, tgt = inp.pin_memory(), tgt.pin_memory()
            inp = inp.to(self.dev, non_blocking=True)
            tgt = tgt.to(self.dev, non_blocking=True)
        else:
            seqs = self.pool[(update * self.ufreq + micro) % len(self.pool)]
            inp, tgt = seqs[:, :-1], seqs[:, 1:]
        with autocast:
            loss, nll = forward(inp, tgt, self.eps)
        return loss, nll, tgt.numel()

    def describe(self):
        return {"norm": self.norm, "vocab": self.vocab, "data": self.data or "random"}


def site_norms(args, cfg):
    """The norm kind of every translation site, by pntrain's rule: a site given at the level of
    --norm or above keeps its own (a flag; in the config when --norm is not a flag), else
    --norm / the config's norm where given, else layer."""
    fallback = cfg["norm"] if "norm" in args.given else "layer"
    own = args.flags if "norm" in args.flags else args.given
    return {site: cfg[site] if site in own else fallback for site in NORM_SITES}


def norms_label(norms):
    """A short name of the per-site kinds, e.g. 'config (enc power, dec layer)'."""
    sides = []
    for side, tag in (("encoder", "enc"), ("decoder", "dec")):
        kinds = sorted({k for s, k in norms.items() if s.startswith(side)})
        sides.append("%s %s" % (tag, "/".join(kinds)))
    return "config (%s)" % ", ".join(sides)


class TranslationTask:
    """The translation model: model_task.cpp's TranslationTask (update batches of
    max_tokens x ranks x update_freq padded tokens in pntrain's seeded order, cut into
    update_freq x ranks pieces); tokens are target tokens."""

    def __init__(self, args, cfg, rank, R):
        self.rank, self.R, self.ufreq = rank, R, cfg["update-freq"]
        self.eps, self.data = cfg["label-smoothing"], args.data
        joint = cfg["share-all-embeddings"]
        self.src, self.tgt, vs, vt = load_parallel(args.data, cfg["source-lang"],
                                                   cfg["target-lang"], cfg["train-subset"], joint)
        if args.vocab and args.vocab != vt:
            raise SystemExit(f"--vocab {args.vocab} but the corpus gives {vt}")
        self.batches = length_batches(self.src, self.tgt, cfg["max-tokens"] * R * self.ufreq)
        self.order = SampleOrder(len(self.batches), cfg["seed"])
        self.norms, self.vocab = site_norms(args, cfg), (vs, vt)
        if cfg["encoder-embed-dim"] != cfg["decoder-embed-dim"]:
            raise SystemExit("pntrain's translation model has one embedding dimension "
                             "(encoder-embed-dim = decoder-embed-dim)")
        torch.manual_seed(cfg["seed"])  # same init on every rank
        self.model = TransformerMT(
            vs, vt, joint, cfg["encoder-embed-dim"], cfg["encoder-layers"],
            cfg["encoder-attention-heads"], cfg["encoder-ffn-embed-dim"], cfg["decoder-layers"],
            cfg["decoder-attention-heads"], cfg["decoder-ffn-embed-dim"], cfg["dropout"],
            cfg["attention-dropout"], self.norms, 1024, cfg["norm-eps"], cfg["norm-alpha"],
            cfg["pn-alpha-fwd"], cfg["pn-alpha-bkw"], pn_warmup(cfg))
        if args.init:
            sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
            from pntrain_torch import read_safetensors
            load_pn_export(self.model, read_safetensors(args.init)[0])

    def to(self, dev):
        self.dev = dev
        self.model.to(dev)

    def micro_loss(self, forward, update, micro, autocast):
        """(loss sum, nll sum, target tokens) of this rank's piece of the update's batch."""
        batch = self.batches[self.order.sample(update)]
        ids = batch_piece(batch, micro * self.R + self.rank, self.ufreq * self.R)
        arrays = make_parallel_batch(self.src, self.tgt, ids)
        pin = self.dev.type == "cuda"  # a copy from pageable memory waits for the device
        src, src_mask, prev, tgt, tgt_mask = (
            (torch.from_numpy(a).pin_memory() if pin else torch.from_numpy(a))
            .to(self.dev, non_blocking=True) for a in arrays)
        with autocast:
            logits = forward(src, src_mask, prev, tgt_mask)
        loss, nll = label_smoothed_loss(logits.float(), tgt, self.eps, tgt_mask)
        return loss, nll, int(arrays[4].sum())

    def describe(self):
        return {"norm": norms_label(self.norms), "norms": self.norms, "vocab": self.vocab[1],
                "data": self.data, "arch": "transformer"}


def run(rank, args, cfg, port, queue):
    R = args.ranks
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    if R > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=R)
    ufreq = cfg["update-freq"]
    translation = cfg["arch"] == "transformer"
    task = (TranslationTask if translation else LmTask)(args, cfg, rank, R)

    dev = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    task.to(dev)
    model = task.model
    model.train()
    params = [p for p in model.parameters()]
    # Several ranks: DDP (its own broadcast of the initial parameters, as pntrain's, and bucketed
    # all-reduces overlapped with the backward), which averages the gradients over the ranks.
    # Norm state stays rank-local, as pntrain's power and batch keep it (no broadcast of
    # buffers before each forward, which would also cost a copy per micro-step).
    trained = getattr(task, "trained", model)  # the LM with its loss, the translation model
    ddp = torch.nn.parallel.DistributedDataParallel(
        trained, broadcast_buffers=False) if R > 1 else None
    # Translation batches change shape every update: one dynamic-shape graph, not a
    # recompilation per shape.
    compile_args = {"dynamic": True} if translation else {}
    forward = torch.compile(ddp or trained, **compile_args) if args.compile else (ddp or trained)
    autocast = (torch.autocast(args.device, dtype=torch.bfloat16) if args.precision == "bf16"
                else contextlib.nullcontext())
    adam = dict(lr=cfg["lr"], betas=(cfg["adam-betas-1"], cfg["adam-betas-2"]),
                eps=cfg["adam-eps"], weight_decay=cfg["weight-decay"])
    try:  # one fused kernel over every parameter where PyTorch has it (2.x on GPUs)
        opt = torch.optim.AdamW(params, fused=args.device == "cuda", **adam)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(params, **adam)
    total = args.warmup + args.updates
    walls, tokens, losses = [], [], []
    for update in range(total):
        t0 = time.perf_counter()
        for p in params:
            p.grad = None
        acc = torch.zeros(2, dtype=torch.float64, device=dev)  # loss and nll sums: read once
        ntok = 0  # the update's tokens on this rank, known on the host
        for micro in range(ufreq):
            # DDP all-reduces in the backward of the update's last micro-step only.
            sync = ddp.no_sync() if ddp and micro < ufreq - 1 else contextlib.nullcontext()
            with sync:
                loss, nll, n = task.micro_loss(forward, update, micro, autocast)
                loss.backward()
            acc[0] += loss.detach().double()
            acc[1] += nll.double()
            ntok += n
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        if R > 1:  # (the CPU) the loss sums and token counts of all ranks in one all-reduce
            sums = torch.cat([acc.cpu(), torch.tensor([float(ntok)], dtype=torch.float64)])
            dist.all_reduce(sums)
            n_all = float(sums[2])
        else:  # the loss sums are read after the step, so that the optimiser's host work
            n_all = float(ntok)  # overlaps the backward on a GPU instead of following it
        # DDP's gradients are the mean over ranks: the sum over ranks is R times it. The loss
        # stays a sum through the backward, as pntrain's: PN's backward statistic nu depends on
        # the scale of the gradient it sees, so the 1/tokens cannot move into the loss.
        torch._foreach_mul_(grads, float(R) / n_all)
        if cfg["clip-norm"] > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg["clip-norm"])
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, update + 1)
        opt.step()
        if R == 1:
            sums = acc.cpu()  # the update's one host read (waits for the backward and the step)
        if args.device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        walls.append(wall)
        tokens.append(n_all)
        losses.append(float(sums[0]) / n_all)

    rss = torch.tensor([peak_rss_mb()], dtype=torch.float64)
    if R > 1:
        all_rss = [torch.zeros(1, dtype=torch.float64) for _ in range(R)]
        dist.all_gather(all_rss, rss)
        rss_list = [float(x) for x in all_rss]
        dist.barrier()
        dist.destroy_process_group()
    else:
        rss_list = [float(rss)]
    if rank == 0:
        meas = slice(args.warmup, total)
        tps_list = [t / w for t, w in zip(tokens[meas], walls[meas])]
        result = {
            "impl": "pytorch", "torch": torch.__version__, "norm": args.norm, "ranks": R,
            "device": args.device, "compile": args.compile, "precision": args.precision,
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "threads": args.threads,
        }
        result.update(task.describe())
        result.update({
            "tokens_per_update": tokens[-1] if tokens else 0,
            "params": sum(p.numel() for p in params) - padded_params(model),
            "updates": args.updates, "warmup": args.warmup,
            "tokens_per_s": statistics.median(tps_list) if tps_list else None,
            "tokens_per_s_all": [round(x, 1) for x in tps_list],
            "peak_rss_mb": rss_list,
            "device_peak_mb": (torch.cuda.max_memory_allocated() / 2**20
                               if args.device == "cuda" else None),
            "loss": [round(x, 4) for x in losses[meas]],
            "loss_first": round(losses[0], 4) if losses else None,
            "loss_all": [round(x, 6) for x in losses],
        })
        if queue is not None:
            queue.put(result)
        else:
            print(json.dumps(result), flush=True)


def padded_params(model):
    """The LM's padded embedding rows (--pad-vocab): zero, never looked up nor predicted, so
    not counted as parameters (pntrain does not count its own)."""
    if not isinstance(model, TransformerLM):
        return 0
    return (model.embed_tokens.num_embeddings - model.vocab) * model.dim


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(rank, args, cfg, port, queue):
    run(rank, args, cfg, port, queue if rank == 0 else None)


def main():
    args, cfg = parse_args()
    args.norm = cfg["norm"]
    if args.ranks == 1:
        run(0, args, cfg, 0, None)
        return
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_spawned, args=(args, cfg, free_port(), queue), nprocs=args.ranks, join=True)
    print(json.dumps(queue.get()), flush=True)


if __name__ == "__main__":
    main()
