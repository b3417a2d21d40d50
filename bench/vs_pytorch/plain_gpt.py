#!/usr/bin/python3
"""A plain PyTorch language model of a pntrain LM config's shape, written for speed: the peer
that pntrain and its twin (model.py, train_torch.py) are measured against.

    /usr/bin/python3 bench/vs_pytorch/plain_gpt.py --config configs/ptb_small.ini \
        --device cpu --updates 3 --warmup 1 --vocab 10001
    python3 bench/vs_pytorch/plain_gpt.py --config configs/gpt2_small_wt2.ini --device cuda \
        --precision bf16 --compile --dropout 0 --data ../shared/data/wikitext-2

The twin reproduces pntrain's model to float rounding, norm state and loss definition included,
and may pay for that; this script is the model as a PyTorch user writes it when throughput is
the goal, so that a table shows both whether pntrain is fast and whether the twin is itself
slow. Its shape comes from the config (decoder-layers, decoder-embed-dim,
decoder-attention-heads, decoder-ffn-embed-dim, tokens-per-sample, max-tokens, update-freq,
dropout, label-smoothing, the optimiser's settings; flags of the same names override it):

    x = sqrt(d) E[tok] + P[pos]        sinusoidal positions, a fixed table as pntrain's (no
                                       position parameters, so the parameter count and the FLOPs
                                       are pntrain's)
    per block (pre-norm):  x = x + proj(SDPA(qkv(LN(x)), causal))
                           x = x + fc2(relu(fc1(LN(x))))
    logits = LN(x) E^T                 tied output layer, one GEMM
    loss = F.cross_entropy(logits, next tokens), the mean over tokens

nn.Embedding (N(0, d^-1/2), as the scaled embedding wants), nn.LayerNorm, one fused qkv
nn.Linear, F.scaled_dot_product_attention(is_causal=True) (flash attention where it applies;
PyTorch before 2.0 falls back to the materialised softmax), ReLU FFN with nn.Linear layers
(PyTorch's default init), dropout on the two residual branches when the config has it,
torch.optim.AdamW (fused=True on a GPU where PyTorch has it; weight decay on every parameter,
as pntrain), the lr schedule of the config (inverse_sqrt or fixed), gradient clipping when
clip-norm > 0, bf16 autocast (--precision bf16; fp32 master weights), optional torch.compile
of the model with its loss. The loss is F.cross_entropy on the logits as the GEMM returns them
(bf16 under autocast, which runs the cross-entropy in fp32); with label smoothing,
label_smoothing = eps V / (V - 1) over the V real classes, which is fairseq's (pntrain's) loss.

The vocabulary: --vocab V, or the size pntrain gives the training text of --data (distinct
words + <pad> <eos> <unk>). On a GPU the output layer has V rounded up to a multiple of
--pad-vocab (default 64 there, 1 on the CPU: cuBLAS runs a GEMM over 33,279 columns much
slower than over 33,280); the padded rows of E are zero and never looked up, and their logits
are -inf through the output layer's bias (added in the GEMM's epilogue), so the loss is the
unpadded model's; with label smoothing the padded columns are sliced off instead (the smoothing
term sums over every column).

Data: random tokens (a pool of 4 micro-batches drawn once on the device, cycled), never the
corpus: the work of an update does not depend on which tokens it sees. The token count of an
update is max-tokens x update-freq (all samples full).

Each update: update-freq micro-steps (forward with the loss, backward of loss / update-freq),
the optimiser step, then one host read of the loss (which waits for the device). Output, the
last line of stdout, one JSON object in train_torch.py's format: {"impl": "pytorch-plain",
"tokens_per_s": median over updates W+1..W+N (tokens over the update's wall time),
"device_peak_mb": torch.cuda.max_memory_allocated on a GPU, "peak_rss_mb": [..], "loss": [..],
...}.
"""
import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pn_config import learning_rate, read_ini  # noqa: E402

# pntrain's defaults (trainer/options.h) for the keys read here.
DEFAULTS = {
    "arch": "transformer_lm", "tokens-per-sample": 64, "max-tokens": 2048, "update-freq": 1,
    "seed": 1, "decoder-layers": 2, "decoder-embed-dim": 128, "decoder-attention-heads": 4,
    "decoder-ffn-embed-dim": 512, "dropout": 0.1, "norm-eps": 1e-5, "lr": 5e-4,
    "adam-eps": 1e-8, "adam-betas-1": 0.9, "adam-betas-2": 0.98, "weight-decay": 0.0,
    "label-smoothing": 0.1, "lr-scheduler": "inverse_sqrt", "warmup-updates": 100,
    "warmup-init-lr": 0.0, "clip-norm": 0.0,
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="pntrain INI config of a language model")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary size V")
    ap.add_argument("--data", default=None, help="without --vocab: V from this corpus' "
                    "training text, counted as pntrain counts it (the tokens stay random)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                    help="bf16: autocast, fp32 master weights; tf32: GPU matmuls in tf32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model and loss")
    ap.add_argument("--pad-vocab", type=int, default=None,
                    help="output rows rounded up to a multiple of this (default 64 on a GPU, "
                    "1 on the CPU)")
    ap.add_argument("--updates", type=int, default=20, help="measured updates N")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured warm-up updates W")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: all cores)")
    for key in DEFAULTS:  # overrides of the config, pntrain's flag names
        ap.add_argument("--" + key, dest=key.replace("-", "_"), default=None)
    args = ap.parse_args(argv)
    cfg = dict(DEFAULTS)
    cfg.update({k: v for k, v in (read_ini(args.config) if args.config else {}).items()
                if k in DEFAULTS})
    for key in DEFAULTS:
        v = getattr(args, key.replace("-", "_"))
        if v is not None:
            cfg[key] = v
    for key, default in DEFAULTS.items():
        cfg[key] = float(cfg[key]) if isinstance(default, float) else type(default)(cfg[key])
    if cfg["arch"] != "transformer_lm":
        ap.error("arch '%s': the plain model is a language model only" % cfg["arch"])
    if cfg["max-tokens"] % cfg["tokens-per-sample"]:
        ap.error("max-tokens must be a multiple of tokens-per-sample")
    if args.vocab <= 0:
        if not args.data:
            ap.error("give --vocab or --data")
        args.vocab = corpus_vocab(args.data)
    if args.pad_vocab is None:
        args.pad_vocab = 64 if args.device == "cuda" else 1
    if args.pad_vocab < 1:
        ap.error("--pad-vocab must be positive")
    if args.device == "cpu" and args.precision == "tf32":
        ap.error("--precision tf32 needs --device cuda")
    if args.compile and not hasattr(torch, "compile"):
        ap.error("--compile needs PyTorch 2 (this is %s)" % torch.__version__)
    if args.threads <= 0:
        args.threads = os.cpu_count() or 1
    return args, cfg


def corpus_vocab(data_dir):
    """pntrain's vocabulary size for a corpus: the distinct words of its training text, plus
    <pad>, <eos> and <unk>."""
    names = ["train.txt", "ptb.train.txt", "wiki.train.tokens", "train"]
    path = next((os.path.join(data_dir, n) for n in names
                 if os.path.isfile(os.path.join(data_dir, n))), None)
    if path is None:
        raise SystemExit("no train file in '%s'" % data_dir)
    words = set()
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            words.update(line.split())
    return len(words - {"<pad>", "<eos>", "<unk>"}) + 3


def sinusoidal(max_len, d):
    """[sin(p w_i) | cos(p w_i)], w_i = 10000^(-i / (d/2 - 1)), p from 0 (pntrain's table)."""
    half = d // 2
    w = torch.exp(-math.log(10000.0) / max(half - 1, 1) * torch.arange(half, dtype=torch.float64))
    p = torch.arange(max_len, dtype=torch.float64)[:, None] * w
    table = torch.zeros(max_len, d, dtype=torch.float64)
    table[:, :half], table[:, half:2 * half] = torch.sin(p), torch.cos(p)
    return table.float()


class Block(nn.Module):
    def __init__(self, d, heads, ffn, dropout, eps):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # B, h, T, dh
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch < 2.0
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1),
                              float("-inf"))
            y = torch.softmax(s, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + F.dropout(self.attention(self.ln1(x)), self.dropout, self.training)
        return x + F.dropout(self.fc2(F.relu(self.fc1(self.ln2(x)))), self.dropout,
                             self.training)


class PlainGPT(nn.Module):
    """forward(tokens [B, T], targets [B, T]) -> mean cross-entropy over the B T tokens."""

    def __init__(self, vocab, d, layers, heads, ffn, max_len, dropout=0.0, eps=1e-5,
                 label_smoothing=0.0, pad_vocab=1):
        super().__init__()
        self.vocab, self.scale = vocab, math.sqrt(d)
        rows = -(-vocab // pad_vocab) * pad_vocab
        # N(0, d^-1/2) over the V real rows; the padded rows, zero, are never looked up nor
        # predicted (drawn apart, so that the padding leaves every initial value as it is)
        self.wte = nn.Embedding(rows, d, _weight=torch.cat(
            [torch.randn(vocab, d) * d ** -0.5, torch.zeros(rows - vocab, d)]))
        self.register_buffer("pos", sinusoidal(max_len, d), persistent=False)
        self.blocks = nn.ModuleList(Block(d, heads, ffn, dropout, eps) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, eps=eps)
        # fairseq's smoothing eps spread over the V - 1 other classes = PyTorch's eps V/(V - 1)
        # spread over all V
        self.smoothing = label_smoothing * vocab / (vocab - 1) if vocab > 1 else 0.0
        # padded logits -inf through the bias, which the GEMM adds in its epilogue (no pass of
        # its own); with smoothing the padded columns are sliced off instead
        self.register_buffer("logit_bias", None if rows == vocab or self.smoothing else
                             torch.zeros(rows).masked_fill(torch.arange(rows) >= vocab,
                                                           float("-inf")), persistent=False)

    def forward(self, tokens, targets):
        B, T = tokens.shape
        x = self.wte(tokens) * self.scale + self.pos[:T]
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x).view(B * T, -1)
        logits = F.linear(x, self.wte.weight, self.logit_bias)  # tied output layer
        if logits.shape[1] != self.vocab and self.smoothing:
            logits = logits[:, :self.vocab]
        smooth = {"label_smoothing": self.smoothing} if self.smoothing else {}
        return F.cross_entropy(logits, targets.view(-1), **smooth)


def run(args, cfg):
    """Trains W + N updates; returns the result dict (train_torch.py's keys)."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(cfg["seed"])
    dev = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    tps, d = cfg["tokens-per-sample"], cfg["decoder-embed-dim"]
    batch, ufreq = cfg["max-tokens"] // tps, cfg["update-freq"]
    model = PlainGPT(args.vocab, d, cfg["decoder-layers"], cfg["decoder-attention-heads"],
                     cfg["decoder-ffn-embed-dim"], tps, cfg["dropout"], cfg["norm-eps"],
                     cfg["label-smoothing"], args.pad_vocab).to(dev)
    model.train()
    step = torch.compile(model) if args.compile else model
    autocast = (torch.autocast(args.device, dtype=torch.bfloat16) if args.precision == "bf16"
                else contextlib.nullcontext())
    adam = dict(lr=cfg["lr"], betas=(cfg["adam-betas-1"], cfg["adam-betas-2"]),
                eps=cfg["adam-eps"], weight_decay=cfg["weight-decay"])
    try:
        opt = torch.optim.AdamW(model.parameters(), fused=args.device == "cuda", **adam)
    except (TypeError, RuntimeError):  # PyTorch without the fused AdamW
        opt = torch.optim.AdamW(model.parameters(), **adam)
    gen = torch.Generator().manual_seed(cfg["seed"])
    pool = [torch.randint(1, args.vocab, (batch, tps + 1), generator=gen) for _ in range(4)]
    pool = [(s[:, :-1].contiguous().to(dev), s[:, 1:].contiguous().to(dev)) for s in pool]
    total, walls, losses = args.warmup + args.updates, [], []
    for update in range(total):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, update + 1)
        loss_sum = torch.zeros((), device=dev)
        for micro in range(ufreq):
            x, y = pool[(update * ufreq + micro) % len(pool)]
            with autocast:
                loss = step(x, y) / ufreq
            loss.backward()
            loss_sum += loss.detach()
        if cfg["clip-norm"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip-norm"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss_sum))  # the update's one host read: waits for the device
        if args.device == "cuda":
            torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    tokens = batch * tps * ufreq
    tps_list = [tokens / w for w in walls[args.warmup:]]
    params = sum(p.numel() for p in model.parameters())
    return {
        "impl": "pytorch-plain", "torch": torch.__version__, "norm": "layer", "ranks": 1,
        "device": args.device, "compile": args.compile, "precision": args.precision,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "threads": args.threads, "vocab": args.vocab, "data": "random",
        "positions": "sinusoidal", "pad_vocab": args.pad_vocab,
        "tokens_per_update": tokens,
        "params": params - (model.wte.num_embeddings - args.vocab) * d,  # padded rows left out
        "updates": args.updates, "warmup": args.warmup,
        "tokens_per_s": statistics.median(tps_list) if tps_list else None,
        "tokens_per_s_all": [round(x, 1) for x in tps_list],
        "peak_rss_mb": [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
        "device_peak_mb": (torch.cuda.max_memory_allocated() / 2**20
                           if args.device == "cuda" else None),
        "loss": [round(x, 4) for x in losses[args.warmup:]],
        "loss_first": round(losses[0], 4) if losses else None,
        "loss_all": [round(x, 6) for x in losses],
    }


def main():
    args, cfg = parse_args()
    result = run(args, cfg)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
