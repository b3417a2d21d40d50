#!/usr/bin/env python3
"""PyTorch twin of pntrain's models, rebuilt from a `pn export` safetensors file.

    python3 python/pntrain_torch.py MODEL.safetensors --data DIR [--split valid] [--rank R]

prints the split's loss (natural log per target token, as `pntrain --eval-only` reports it);
DIR is the run's --data: pntrain's text layout or a fairseq-preprocess data-bin.
As a module:

    from pntrain_torch import load
    model, meta = load("model.safetensors")         # an nn.Module in evaluation form
    logits = model(tokens)                           # LM: [batch, time] -> [batch, time, vocab]
    logits = model(src, src_mask, prev)              # translation

The models are pntrain's (model/lm.h, model/translation.h): pre-norm Transformer blocks
(norm, attention, residual; norm, ReLU feed-forward, residual), token embeddings scaled by
sqrt(d) plus pntrain's sinusoidal positions (kernels: sin of the first d/2 features,
cos of the second half, frequencies exp(-i log(10000) / (d/2 - 1))), a final norm and the
output projection tied to the (target) embedding. Every norm runs in inference form, chosen by
the statistic the export names for it (its row of pntrain's norm registry, `pntrain
--list-norms`), not by its name:
    row_moments     gamma (x - mean_row) / sqrt(var_row + eps) + beta          (layer)
    row_rms         gamma x / sqrt(mean_row x^2 + eps)                         (rms)
    group_moments   row_moments within each of G groups of d/G features        (group)
    column_moments  gamma (x - running_mean) / sqrt(running_var + eps) + beta  (batch)
    column_psi2     gamma x / sqrt(running_psi2 + eps) + beta                  (power_v, power)
    elementwise     gamma tanh(alpha x) + beta                                 (dyt)
(sync_* as their local twins), the column ones behind the optional pre-scaling
x / sqrt(mean_group x^2 + eps).
The running state is the export's evaluation state (its --pn-eval-state), or with --rank R the
state rank R saved (rank-local norms of multi-rank runs). Everything runs in float64.

safetensors is parsed here with json + struct + numpy (no safetensors package needed):
an 8-byte little-endian header length, a JSON header of {name: {dtype, shape, data_offsets}}
plus "__metadata__" (string values), then the raw little-endian tensors.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """Returns ({name: float64 tensor}, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        a = np.frombuffer(raw, dtype=np.dtype(_DTYPES[t["dtype"]]).newbyteorder("<"),
                          count=(e - b) // np.dtype(_DTYPES[t["dtype"]]).itemsize,
                          offset=8 + n + b)
        tensors[name] = torch.from_numpy(a.astype(np.float64).reshape(t["shape"]))
    return tensors, meta


def sinusoidal_positions(max_len, d):
    """pntrain's position table (kernels/cpu/elementwise.cpp sinusoidal_positions)."""
    half = d // 2
    step = math.log(10000.0) / (half - 1) if half > 1 else 0.0
    p = torch.arange(max_len, dtype=torch.float64)[:, None]
    w = torch.exp(-step * torch.arange(half, dtype=torch.float64))[None, :]
    table = torch.zeros(max_len, d, dtype=torch.float64)
    table[:, :half] = torch.sin(p * w)
    table[:, half:2 * half] = torch.cos(p * w)
    return table


class InferenceNorm(nn.Module):
    """One pntrain norm in inference form, from its statistic (the export's norm.<place>.statistic,
    the registry's row of it: layers/norms/norms.inc; see the module docstring)."""

    def __init__(self, meta, key, prefix, t, eps, state_prefix=""):
        super().__init__()
        if key + ".statistic" not in meta:
            raise ValueError("the export names no statistic for %s (%s): export the checkpoint "
                             "again with this pntrain's pnexport" % (key, meta[key]))
        self.kind, self.stat, self.eps = meta[key], meta[key + ".statistic"], eps
        self.groups, self.prescale = int(meta[key + ".groups"]), int(meta[key + ".prescale_groups"])
        self.weight = t[prefix + ".weight"]
        self.bias = t.get(prefix + ".bias")
        self.alpha = t.get(prefix + ".alpha")
        get = lambda s: t[state_prefix + prefix + "." + s]
        if self.stat == "column_moments":
            self.mean, self.var = get("running_mean"), get("running_var")
        elif self.stat == "column_psi2":
            self.psi2 = get("running_psi2")
        elif self.stat not in ("row_moments", "row_rms", "group_moments", "elementwise"):
            raise ValueError("norm %s of the export has statistic '%s', which this script does "
                             "not know" % (self.kind, self.stat))

    def _prescale(self, x):
        g = self.prescale
        shape = x.shape
        z = x.reshape(*shape[:-1], g, shape[-1] // g)
        z = z / torch.sqrt((z * z).mean(-1, keepdim=True) + self.eps)
        return z.reshape(shape)

    def forward(self, x):
        b = self.stat
        if b == "row_moments":
            return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)
        if b == "row_rms":
            return self.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps)
        if b == "group_moments":
            shape = x.shape
            z = x.reshape(*shape[:-1], self.groups, shape[-1] // self.groups)
            z = (z - z.mean(-1, keepdim=True)) / torch.sqrt(z.var(-1, unbiased=False, keepdim=True)
                                                            + self.eps)
            return self.weight * z.reshape(shape) + self.bias
        if b == "elementwise":
            return self.weight * torch.tanh(self.alpha * x) + self.bias
        if self.prescale > 0:
            x = self._prescale(x)
        if b == "column_moments":
            return self.weight * (x - self.mean) / torch.sqrt(self.var + self.eps) + self.bias
        return self.weight * x / torch.sqrt(self.psi2 + self.eps) + self.bias  # column_psi2


class Attention(nn.Module):
    """Multi-head attention from fairseq-named q/k/v/out projections."""

    def __init__(self, prefix, t, heads):
        super().__init__()
        self.heads = heads
        self.p = {n: (t[prefix + "." + n + "_proj.weight"], t[prefix + "." + n + "_proj.bias"])
                  for n in ("q", "k", "v", "out")}

    def forward(self, x, mem, causal, key_mask=None):
        lin = lambda z, n: F.linear(z, *self.p[n])
        B, Tq, d = x.shape
        Tk, H = mem.shape[1], self.heads
        split = lambda z, T: z.reshape(B, T, H, d // H).transpose(1, 2)
        q, k, v = split(lin(x, "q"), Tq), split(lin(mem, "k"), Tk), split(lin(mem, "v"), Tk)
        s = q @ k.transpose(-1, -2) / math.sqrt(d // H)
        allowed = torch.ones(Tq, Tk, dtype=torch.bool)
        if causal:
            allowed = torch.tril(allowed)
        allowed = allowed[None, None]
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :].bool()
        s = s.masked_fill(~allowed, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)  # a query with no allowed key gets zeros
        return lin((p @ v).transpose(1, 2).reshape(B, Tq, d), "out")


class Block(nn.Module):
    """A pre-norm block: self-attention, optional cross-attention, feed-forward."""

    def __init__(self, prefix, t, meta, side, heads, state_prefix, cross=False, causal=False):
        super().__init__()
        eps = float(meta["norm_eps"])

        def norm(place, name):
            return InferenceNorm(meta, "norm.%s_%s" % (side, place), prefix + "." + name, t,
                                 eps, state_prefix)
        self.causal = causal
        self.norm_self = norm("self", "self_attn_layer_norm")
        self.attn = Attention(prefix + ".self_attn", t, heads)
        self.cross = cross
        if cross:
            self.norm_cross = norm("cross", "encoder_attn_layer_norm")
            self.cross_attn = Attention(prefix + ".encoder_attn", t, heads)
        self.norm_ff = norm("ff", "final_layer_norm")
        self.fc1 = (t[prefix + ".fc1.weight"], t[prefix + ".fc1.bias"])
        self.fc2 = (t[prefix + ".fc2.weight"], t[prefix + ".fc2.bias"])

    def forward(self, h, self_mask=None, enc=None, enc_mask=None):
        a = self.norm_self(h)
        h = h + self.attn(a, a, self.causal, self_mask)
        if self.cross:
            h = h + self.cross_attn(self.norm_cross(h), enc, False, enc_mask)
        return h + F.linear(F.relu(F.linear(self.norm_ff(h), *self.fc1)), *self.fc2)


def _final_norm(meta, t, side, name, state_prefix):
    return InferenceNorm(meta, "norm.%s_final" % side, name, t, float(meta["norm_eps"]),
                         state_prefix)


class LanguageModel(nn.Module):
    """model/lm.h: tokens [B, T] -> logits [B, T, V]."""

    def __init__(self, t, meta, state_prefix=""):
        super().__init__()
        self.embed = t["decoder.embed_tokens.weight"]
        d = self.embed.shape[1]
        self.scale = math.sqrt(d)
        self.positions = sinusoidal_positions(int(meta["max_len"]), d)
        heads = int(meta["decoder_heads"])
        self.blocks = nn.ModuleList(
            Block("decoder.layers.%d" % l, t, meta, "decoder", heads, state_prefix, causal=True)
            for l in range(int(meta["decoder_layers"])))
        self.norm_final = _final_norm(meta, t, "decoder", "decoder.layer_norm", state_prefix)

    def forward(self, tokens):
        h = self.scale * self.embed[tokens] + self.positions[:tokens.shape[1]]
        for b in self.blocks:
            h = b(h)
        return self.norm_final(h) @ self.embed.T


class TranslationModel(nn.Module):
    """model/translation.h: (src [B, S], src_mask [B, S], prev [B, T]) -> logits [B, T, V]."""

    def __init__(self, t, meta, state_prefix=""):
        super().__init__()
        self.src_embed = t["encoder.embed_tokens.weight"]
        self.tgt_embed = t["decoder.embed_tokens.weight"]
        d = self.src_embed.shape[1]
        self.scale = math.sqrt(d)
        self.positions = sinusoidal_positions(int(meta["max_len"]), d)
        self.encoder = nn.ModuleList(
            Block("encoder.layers.%d" % l, t, meta, "encoder", int(meta["encoder_heads"]),
                  state_prefix) for l in range(int(meta["encoder_layers"])))
        self.enc_final = _final_norm(meta, t, "encoder", "encoder.layer_norm", state_prefix)
        self.decoder = nn.ModuleList(
            Block("decoder.layers.%d" % l, t, meta, "decoder", int(meta["decoder_heads"]),
                  state_prefix, cross=True, causal=True)
            for l in range(int(meta["decoder_layers"])))
        self.dec_final = _final_norm(meta, t, "decoder", "decoder.layer_norm", state_prefix)

    def forward(self, src, src_mask, prev):
        h = self.scale * self.src_embed[src] + self.positions[:src.shape[1]]
        for b in self.encoder:
            h = b(h, self_mask=src_mask)
        enc = self.enc_final(h)
        g = self.scale * self.tgt_embed[prev] + self.positions[:prev.shape[1]]
        for b in self.decoder:
            g = b(g, enc=enc, enc_mask=src_mask)
        return self.dec_final(g) @ self.tgt_embed.T


def load(path, rank=None):
    """The model of an export (evaluation state, or rank `rank`'s saved state) and its metadata."""
    t, meta = read_safetensors(path)
    if meta.get("format") != "pntrain-export-1":
        raise ValueError("%s is not a pntrain export (metadata format %r)"
                         % (path, meta.get("format")))
    state_prefix = "" if rank is None else "ranks.%d." % rank
    cls = TranslationModel if meta["arch"] == "transformer" else LanguageModel
    return cls(t, meta, state_prefix).eval(), meta


# ---- data: pntrain's text layouts (trainer/data.cpp, trainer/translation_data.cpp) and
# fairseq-preprocess data-bins (trainer/fairseq_data.h), read as pntrain reads them ----

_INT_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16,
              9: np.uint32, 10: np.uint64}


def read_indexed(prefix):
    """Items of a fairseq MMIDIDX dataset (prefix.idx/.bin) as lists of pntrain ids (f - 1)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    if idx[:9] != b"MMIDIDX\x00\x00" or struct.unpack("<Q", idx[9:17])[0] != 1:
        raise ValueError("%s.idx is not a version-1 fairseq mmap index" % prefix)
    dtype = np.dtype(_INT_CODES[idx[17]]).newbyteorder("<")
    n = struct.unpack("<Q", idx[18:26])[0]
    sizes = np.frombuffer(idx, dtype="<i4", count=n, offset=34)
    pointers = np.frombuffer(idx, dtype="<i8", count=n, offset=34 + 4 * n)
    data = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r")
    items = []
    for size, ptr in zip(sizes, pointers):
        ids = np.frombuffer(data, dtype=dtype, count=int(size), offset=int(ptr)).astype(np.int64)
        items.append([2 if i == 0 else int(i) - 1 for i in ids])  # fairseq <s> reads as <unk>
    return items


def _is_databin_lm(data):
    return os.path.isfile(os.path.join(data, "dict.txt"))

def _encode(line, index):
    return [index.get(w, 2) for w in line.split()] + [1]  # <unk> 2, <eos> 1


def _lm_split_file(data, split):
    for name in (split + ".txt", "ptb.%s.txt" % split, "wiki.%s.tokens" % split, split):
        if os.path.isfile(os.path.join(data, name)):
            return os.path.join(data, name)
    raise FileNotFoundError("no %s split in %s" % (split, data))


@torch.no_grad()
def lm_loss(model, meta, data, split="valid", batch=16):
    """Mean nll over the split's targets, cut into --tokens-per-sample samples as pntrain does."""
    index = {w: i for i, w in enumerate(meta["vocab"].split("\n"))}
    stream = []
    if _is_databin_lm(data):
        for item in read_indexed(os.path.join(data, split)):
            stream += item
    else:
        with open(_lm_split_file(data, split), encoding="utf-8") as f:
            for line in f:
                if line.split():
                    stream += _encode(line, index)
    T = int(meta["tokens_per_sample"])
    n = len(stream) - 1  # targets
    samples = (n + T - 1) // T
    s = torch.tensor(stream + [0] * (samples * T + 1 - len(stream)), dtype=torch.long)
    total, count = 0.0, 0
    for first in range(0, samples, batch):
        ids = range(first, min(samples, first + batch))
        x = torch.stack([s[i * T:i * T + T] for i in ids])
        y = torch.stack([s[i * T + 1:i * T + T + 1] for i in ids])
        pos = torch.stack([torch.arange(i * T, i * T + T) for i in ids])
        mask = pos < n
        lp = torch.log_softmax(model(x), -1).gather(-1, y[..., None])[..., 0]
        total -= lp[mask].sum().item()
        count += int(mask.sum())
    return total / count, count


@torch.no_grad()
def translation_loss(model, meta, data, split="valid", batch=32):
    """Mean nll over the split's target tokens (teacher forcing, prev = <eos> + target)."""
    src_index = {w: i for i, w in enumerate(meta["src_vocab"].split("\n"))}
    tgt_index = {w: i for i, w in enumerate(meta["tgt_vocab"].split("\n"))}
    def read(lang):
        with open(os.path.join(data, "%s.%s" % (split, lang)), encoding="utf-8") as f:
            return f.read().split("\n")
    s, t = meta["source_lang"], meta["target_lang"]
    if os.path.isfile(os.path.join(data, "dict.%s.txt" % s)):  # a fairseq data-bin
        prefix = os.path.join(data, "%s.%s-%s." % (split, s, t))
        pairs = list(zip(read_indexed(prefix + s), read_indexed(prefix + t)))
    else:
        src_lines, tgt_lines = read(s), read(t)
        if src_lines and src_lines[-1] == "":
            src_lines, tgt_lines = src_lines[:-1], tgt_lines[:-1]
        pairs = [(_encode(a, src_index), _encode(b, tgt_index))
                 for a, b in zip(src_lines, tgt_lines)]
    total, count = 0.0, 0
    for first in range(0, len(pairs), batch):
        chunk = pairs[first:first + batch]
        S, T = max(len(a) for a, _ in chunk), max(len(b) for _, b in chunk)
        src = torch.zeros(len(chunk), S, dtype=torch.long)
        mask = torch.zeros(len(chunk), S, dtype=torch.bool)
        prev = torch.zeros(len(chunk), T, dtype=torch.long)
        tgt = torch.zeros(len(chunk), T, dtype=torch.long)
        tmask = torch.zeros(len(chunk), T, dtype=torch.bool)
        for r, (a, b) in enumerate(chunk):
            src[r, :len(a)] = torch.tensor(a)
            mask[r, :len(a)] = True
            tgt[r, :len(b)] = torch.tensor(b)
            prev[r, :len(b)] = torch.tensor([1] + b[:-1])
            tmask[r, :len(b)] = True
        lp = torch.log_softmax(model(src, mask, prev), -1).gather(-1, tgt[..., None])[..., 0]
        total -= lp[tmask].sum().item()
        count += int(tmask.sum())
    return total / count, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="safetensors file written by `launcher/pn export`")
    ap.add_argument("--data", required=True,
                    help="the run's corpus directory (text, or a fairseq-preprocess data-bin)")
    ap.add_argument("--split", default="valid")
    ap.add_argument("--rank", type=int, default=None,
                    help="use rank R's saved norm state instead of the evaluation state")
    args = ap.parse_args()
    model, meta = load(args.model, args.rank)
    fn = translation_loss if meta["arch"] == "transformer" else lm_loss
    loss, n = fn(model, meta, args.data, args.split)
    print("torch | %s loss %.6f ppl %.2f | %d tokens" % (args.split, loss, math.exp(loss), n))


if __name__ == "__main__":
    sys.exit(main())
