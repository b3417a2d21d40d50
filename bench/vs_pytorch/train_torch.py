#!/usr/bin/python3
"""Train the PyTorch twin of pntrain's LM (model.py) and report its throughput as one JSON line.

    /usr/bin/python3 bench/vs_pytorch/train_torch.py --config configs/ptb_small.ini \
        --norm layer --ranks 2 --threads 1 --updates 20 --warmup 5 --vocab 67 [--data DIR]

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
synchronisation, and the loss sums are read once per update, as pntrain does.

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
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import TransformerLM, label_smoothed_loss  # noqa: E402

# pntrain's defaults (trainer/options.h) for the keys we use.
DEFAULTS = {
    "tokens-per-sample": 64, "max-tokens": 2048, "update-freq": 1, "seed": 1,
    "decoder-layers": 2, "decoder-embed-dim": 128, "decoder-attention-heads": 4,
    "decoder-ffn-embed-dim": 512, "dropout": 0.1, "norm": "layer", "norm-eps": 1e-5,
    "norm-alpha": 0.9, "pn-alpha-fwd": 0.9, "pn-alpha-bkw": 0.9, "pn-warmup": -1,
    "lr": 5e-4, "adam-eps": 1e-8, "adam-betas-1": 0.9, "adam-betas-2": 0.98,
    "weight-decay": 0.0, "label-smoothing": 0.1, "lr-scheduler": "inverse_sqrt",
    "warmup-updates": 100, "warmup-init-lr": 0.0, "clip-norm": 0.0,
}


def read_ini(path):
    """Boost.Program_options INI subset: 'key = value' lines, '#' comments, no sections."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("[") or "=" not in line:
                continue
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--config", help="pntrain INI config (sizes, batch, optimiser)")
    ap.add_argument("--data", default=None, help="corpus directory (train.txt or ptb.train.txt); "
                    "default: random tokens")
    ap.add_argument("--vocab", type=int, default=0, help="vocabulary size (random tokens: "
                    "required; with --data: checked against the corpus' vocabulary)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="threads per rank (0: cores / ranks)")
    ap.add_argument("--updates", type=int, default=20, help="measured updates N")
    ap.add_argument("--warmup", type=int, default=5, help="unmeasured warm-up updates W")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                    help="bf16: autocast with fp32 master weights (CPU or GPU); tf32: GPU "
                    "matmuls in tf32")
    # overrides of the config (pntrain's flag names)
    for key in DEFAULTS:
        ap.add_argument("--" + key, dest=key.replace("-", "_"), default=None)
    args = ap.parse_args(argv)
    cfg = dict(DEFAULTS)
    if args.config:
        cfg.update(read_ini(args.config))
    for key in DEFAULTS:
        v = getattr(args, key.replace("-", "_"))
        if v is not None:
            cfg[key] = v
    for key, default in DEFAULTS.items():  # types of the defaults
        cfg[key] = type(default)(cfg[key]) if not isinstance(default, float) else float(cfg[key])
    if args.threads <= 0:
        args.threads = max(1, (os.cpu_count() or 1) // args.ranks)
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


def learning_rate(cfg, update):
    """trainer/schedule.h (update 1-based)."""
    lr, init, W = cfg["lr"], cfg["warmup-init-lr"], cfg["warmup-updates"]
    if W > 0 and update < W:
        return init + (lr - init) * update / W
    if cfg["lr-scheduler"] == "inverse_sqrt" and W > 0:
        return lr * (W / update) ** 0.5
    return lr


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


# ---------------------------------------------------------------- training

def run(rank, args, cfg, port, queue):
    R = args.ranks
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    if R > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=R)
    tps, max_tokens, ufreq = cfg["tokens-per-sample"], cfg["max-tokens"], cfg["update-freq"]
    if max_tokens % tps:
        raise SystemExit("--max-tokens must be a multiple of --tokens-per-sample")
    micro_samples = max_tokens * R // tps  # samples per micro-batch over all ranks (pntrain)
    b0, b1 = micro_samples * rank // R, micro_samples * (rank + 1) // R

    if args.data:
        stream, vocab = load_stream(args.data)
        if args.vocab and args.vocab != vocab:
            raise SystemExit(f"--vocab {args.vocab} but the corpus gives {vocab}")
        samples = Samples(stream, tps, cfg["seed"])
    else:
        if args.vocab <= 0:
            raise SystemExit("--vocab is required with random tokens")
        vocab = args.vocab
        # random tokens: a pool of micro-batches, cycled (ids 1..V-1, never <pad>)
        gen = torch.Generator().manual_seed(cfg["seed"] * 1000 + rank)
        pool = [torch.randint(1, vocab, (b1 - b0, tps + 1), generator=gen) for _ in range(4)]

    dev = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(cfg["seed"])  # same init on every rank
    pn_warmup = cfg["pn-warmup"] if cfg["pn-warmup"] >= 0 else cfg["warmup-updates"] * ufreq
    model = TransformerLM(vocab, cfg["decoder-layers"], cfg["decoder-embed-dim"],
                          cfg["decoder-attention-heads"], cfg["decoder-ffn-embed-dim"], tps,
                          cfg["dropout"], args.norm, cfg["norm-eps"], cfg["norm-alpha"],
                          cfg["pn-alpha-fwd"], cfg["pn-alpha-bkw"], pn_warmup).to(dev)
    model.train()
    params = [p for p in model.parameters()]
    # Several ranks: DDP (its own broadcast of the initial parameters, as pntrain's, and bucketed
    # all-reduces overlapped with the backward), which averages the gradients over the ranks.
    ddp = torch.nn.parallel.DistributedDataParallel(model) if R > 1 else None
    forward = torch.compile(ddp or model) if args.compile else (ddp or model)
    autocast = (torch.autocast(args.device, dtype=torch.bfloat16) if args.precision == "bf16"
                else contextlib.nullcontext())
    adam = dict(lr=cfg["lr"], betas=(cfg["adam-betas-1"], cfg["adam-betas-2"]),
                eps=cfg["adam-eps"], weight_decay=cfg["weight-decay"])
    try:  # one fused kernel over every parameter where PyTorch has it (2.x on GPUs)
        opt = torch.optim.AdamW(params, fused=args.device == "cuda", **adam)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(params, **adam)
    if args.data is None:
        pool = [p.to(dev) for p in pool]
    eps_ls = cfg["label-smoothing"]
    total = args.warmup + args.updates
    walls, tokens, losses = [], [], []
    for update in range(total):
        t0 = time.perf_counter()
        for p in params:
            p.grad = None
        acc = torch.zeros(3, dtype=torch.float64, device=dev)  # loss, nll, tokens: read once
        for micro in range(ufreq):
            if args.data:
                g0 = (update * ufreq + micro) * micro_samples
                ids = [samples.sample(g0 + i) for i in range(b0, b1)]
                inp, tgt = samples.batch(ids)
                inp, tgt = inp.to(dev, non_blocking=True), tgt.to(dev, non_blocking=True)
            else:
                seqs = pool[(update * ufreq + micro) % len(pool)]
                inp, tgt = seqs[:, :-1], seqs[:, 1:]
            # DDP all-reduces in the backward of the update's last micro-step only.
            sync = ddp.no_sync() if ddp and micro < ufreq - 1 else contextlib.nullcontext()
            with sync:
                with autocast:
                    logits = forward(inp)
                loss, nll = label_smoothed_loss(logits.float(), tgt, eps_ls)
                loss.backward()
            acc[0] += loss.detach().double()
            acc[1] += nll.double()
            acc[2] += tgt.numel()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        sums = acc.cpu()  # the update's one host read (waits for the forward and backward)
        if R > 1:  # DDP's gradients are the mean over ranks: the sum over ranks is R times it
            dist.all_reduce(sums)
        n_all = float(sums[2])
        torch._foreach_mul_(grads, float(R) / n_all)
        if cfg["clip-norm"] > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg["clip-norm"])
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, update + 1)
        opt.step()
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
            "threads": args.threads, "vocab": vocab, "data": args.data or "random",
            "tokens_per_update": tokens[-1] if tokens else 0,
            "params": sum(p.numel() for p in params),
            "updates": args.updates, "warmup": args.warmup,
            "tokens_per_s": statistics.median(tps_list) if tps_list else None,
            "tokens_per_s_all": [round(x, 1) for x in tps_list],
            "peak_rss_mb": rss_list,
            "loss": [round(x, 4) for x in losses[meas]],
            "loss_first": round(losses[0], 4) if losses else None,
        }
        if queue is not None:
            queue.put(result)
        else:
            print(json.dumps(result), flush=True)


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
