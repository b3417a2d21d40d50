"""PyTorch twins of pntrain's language model (docs/contract.md §8) and translation model, for
bench/vs_pytorch.

Pre-norm Transformer decoder, as model/lm.cpp:
    h0 = sqrt(d) E[tok] + P[pos]           (P sinusoidal [sin | cos], freq 10000^(-i/(d/2-1)))
    per block: m = h + dropout(attn(norm_self(h)));  h = m + dropout(ff(norm_ff(m)))
    logits = norm_final(h) E^T             (tied output projection, no bias)
Init as pntrain: E ~ N(0, d^-1/2); linear weights Xavier uniform on [out, in] (the fused qkv
projection is one [3d, d] matrix), biases 0; norm gamma 1, beta 0.
Loss: fairseq's label-smoothed cross-entropy (kernels/cpu/loss.cpp), summed over tokens.

Norms (docs/contract.md §2, the model's rows are its tokens; the LM's rows are never masked, the
translation model's padded rows enter no statistic):
  layer: nn.LayerNorm;  batch: nn.BatchNorm1d over the [tokens, d] view (statistics over all
  tokens of the micro-batch);  power: PowerNorm below (layers/norms/power_norm.h).

TransformerMT is the translation model (model/translation.h, `arch = transformer`): the same
blocks as an encoder-decoder, padded batches, norm kinds per site; see its docstring.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoidal_positions(max_len, d):
    """kernels/cpu/elementwise.cpp sinusoidal_positions: [sin(p w_i) | cos(p w_i)], p from 0."""
    half = d // 2
    step = math.log(10000.0) / (half - 1) if half > 1 else 0.0
    w = torch.exp(-step * torch.arange(half, dtype=torch.float64))
    p = torch.arange(max_len, dtype=torch.float64)[:, None] * w[None, :]
    table = torch.zeros(max_len, d, dtype=torch.float64)
    table[:, :half] = torch.sin(p)
    table[:, half:2 * half] = torch.cos(p)
    return table.float()


class PowerNormFunction(torch.autograd.Function):
    """PN training iteration of layers/norms/power_norm.h on x [rows, d]; the means, sums and
    dx below cover the unmasked rows only when a mask is given.

    forward:  t += 1; psi_B^2 = mean x^2; s = sqrt(psi_B^2 + eps) if t <= W else
              sqrt(psi^2 + eps) (psi^2 before this iteration); y = gamma x / s + beta;
              psi^2 <- cumulative mean (t <= W) or alpha_fwd psi^2 + (1 - alpha_fwd) psi_B^2
    backward: g = gamma dy; dx = (g - nu xh) / s with nu before this iteration;
              Gamma = mean xh^2, Lambda = mean g xh; nu <- nu (1 - (1-a_bkw) Gamma) + (1-a_bkw)
              Lambda; dgamma = sum dy xh; dbeta = sum dy
    The running state (psi^2, nu, t) lives in float64 buffers of the module, as in pntrain.
    """

    @staticmethod
    def forward(ctx, x, gamma, beta, module, mask=None):
        # mask: None (every row real, the LM) or [rows, 1] of 0/1 in x's dtype (translation:
        # padded rows get y's formula but enter no statistic, gradient or dx, as pntrain's).
        rows = x.shape[0] if mask is None else mask.sum(dtype=torch.float64)
        # t is a tensor and the warmup a select, not a Python branch, so that torch.compile
        # traces one graph for every iteration instead of recompiling as t counts up.
        module.t.add_(1)
        sum_x2 = (x * x if mask is None else x * x * mask).sum(0, dtype=torch.float64)
        psi2_b = sum_x2 / rows
        warm = module.t <= module.warmup
        psi2 = module.running_psi2
        inv_s = torch.rsqrt(torch.where(warm, psi2_b, psi2) + module.eps)
        module.running_psi2.copy_(torch.where(warm, psi2 + (psi2_b - psi2) / module.t,
                                              module.alpha_fwd * psi2 +
                                              (1 - module.alpha_fwd) * psi2_b))
        inv_s32 = inv_s.to(x.dtype)
        y = torch.addcmul(beta, x, inv_s32 * gamma)
        ctx.save_for_backward(x, gamma, inv_s32, mask)
        ctx.module = module
        ctx.rows = rows
        ctx.gamma_term = (sum_x2 * inv_s * inv_s / rows)  # Gamma = mean xh^2
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gamma, inv_s, mask = ctx.saved_tensors
        module = ctx.module
        rows = ctx.rows
        if mask is not None:
            dy = dy * mask
        xh = x * inv_s
        sum_dy_xh = (dy * xh).sum(0, dtype=torch.float64)
        dbeta = dy.sum(0)
        dgamma = sum_dy_xh.to(dy.dtype)
        nu = module.nu.to(dy.dtype)
        # dx = (gamma dy - nu xh) / s, nu before this iteration
        dx = (dy * gamma - xh * nu) * inv_s
        if mask is not None:
            dx = dx * mask
        lam = gamma.detach().double() * sum_dy_xh / rows
        a = 1 - module.alpha_bkw
        module.nu.mul_(1 - a * ctx.gamma_term).add_(a * lam)
        return dx, dgamma, dbeta, None, None


class PowerNorm(nn.Module):
    def __init__(self, d, eps=1e-5, alpha_fwd=0.9, alpha_bkw=0.9, warmup=0):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps, self.alpha_fwd, self.alpha_bkw, self.warmup = eps, alpha_fwd, alpha_bkw, warmup
        self.register_buffer("running_psi2", torch.ones(d, dtype=torch.float64))
        self.register_buffer("nu", torch.zeros(d, dtype=torch.float64))
        self.register_buffer("t", torch.zeros((), dtype=torch.float64))  # training forwards

    def forward(self, x, mask=None):
        """mask: None, or [rows, 1] 0/1 (1 = real token) over x's rows (see PowerNormFunction)."""
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.training:
            if mask is not None:
                mask = mask.to(x2.dtype)
            y = PowerNormFunction.apply(x2, self.weight, self.bias, self, mask)
        else:
            inv = torch.rsqrt(self.running_psi2 + self.eps).to(x.dtype)
            y = torch.addcmul(self.bias, x2, inv * self.weight)
        return y.reshape(shape)


class TokenBatchNorm(nn.Module):
    """BatchNorm over every token of the micro-batch: x [nseq, T, d] seen as [nseq*T, d]."""

    def __init__(self, d, eps=1e-5, alpha=0.9):
        super().__init__()
        self.bn = nn.BatchNorm1d(d, eps=eps, momentum=1 - alpha)

    def forward(self, x, mask=None):
        """mask: None, or [rows, 1] 0/1 over x's rows: in training the statistics (and the
        gradients) cover the real rows only; padded rows are left 0, which nothing reads."""
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if mask is None or not self.training:
            return self.bn(x2).reshape(shape)
        idx = mask.reshape(-1).nonzero().squeeze(1)
        y = x2.new_zeros(x2.shape).index_copy(0, idx, self.bn(x2.index_select(0, idx)))
        return y.reshape(shape)


def make_norm(kind, d, eps=1e-5, alpha=0.9, alpha_fwd=0.9, alpha_bkw=0.9, pn_warmup=0):
    if kind == "layer":
        return nn.LayerNorm(d, eps=eps)
    if kind == "batch":
        return TokenBatchNorm(d, eps, alpha)
    if kind == "power":
        return PowerNorm(d, eps, alpha_fwd, alpha_bkw, pn_warmup)
    raise ValueError(f"norm '{kind}' is not implemented on the PyTorch side (layer, batch, power)")


def _xavier_linear(d_in, d_out):
    lin = nn.Linear(d_in, d_out)
    nn.init.xavier_uniform_(lin.weight)  # bound sqrt(6 / (in + out)), as pntrain
    nn.init.zeros_(lin.bias)
    return lin


class CausalSelfAttention(nn.Module):
    """layers/attention.cpp: fused qkv [q | k | v], heads are column blocks of d/heads;
    softmax(Q K^T / sqrt(dh)) over j <= i; output projection."""

    def __init__(self, d, heads):
        super().__init__()
        assert d % heads == 0
        self.d, self.heads = d, heads
        self.qkv_proj = _xavier_linear(d, 3 * d)
        self.out_proj = _xavier_linear(d, d)

    def forward(self, x):
        n, T, d = x.shape
        h, dh = self.heads, d // self.heads
        qkv = self.qkv_proj(x).view(n, T, 3, h, dh).permute(2, 0, 3, 1, 4)  # 3, n, h, T, dh
        q, k, v = qkv[0], qkv[1], qkv[2]
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2: fused (flash on GPUs)
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out_proj(ctx.transpose(1, 2).reshape(n, T, d))
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dh))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(n, T, d)
        return self.out_proj(ctx)


class FeedForward(nn.Module):
    def __init__(self, d, ffn_dim):
        super().__init__()
        self.fc1 = _xavier_linear(d, ffn_dim)
        self.fc2 = _xavier_linear(ffn_dim, d)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d, heads, ffn_dim, dropout, norm_args):
        super().__init__()
        self.self_attn_layer_norm = make_norm(d=d, **norm_args)
        self.self_attn = CausalSelfAttention(d, heads)
        self.final_layer_norm = make_norm(d=d, **norm_args)
        self.ff = FeedForward(d, ffn_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        m = x + self.dropout(self.self_attn(self.self_attn_layer_norm(x)))
        return m + self.dropout(self.ff(self.final_layer_norm(m)))


class TransformerLM(nn.Module):
    """pad_vocab: the embedding's rows rounded up to a multiple of it (a GPU's GEMMs over the
    vocabulary run at full speed only at a multiple of 8, better 64: 19.5 ms against 3.3 ms for
    GPT-2 small's output layer on an H100); the padded rows start at 0 and their logits are -inf,
    so no token is ever predicted there and the loss is the unpadded model's. The -inf comes from
    the output layer's bias (0 on the real columns, -inf on the padded ones; a buffer, so no
    gradient), which the GEMM adds in its epilogue: a masked_fill would read and write the
    16K x 33K logits once more in the forward and their gradient once more in the backward
    (eager; torch.compile fuses either). Adding 0 leaves every real logit as it is."""

    def __init__(self, vocab, layers=2, dim=256, heads=4, ffn_dim=1024, max_len=64,
                 dropout=0.1, norm="layer", norm_eps=1e-5, norm_alpha=0.9, pn_alpha_fwd=0.9,
                 pn_alpha_bkw=0.9, pn_warmup=0, pad_vocab=1):
        super().__init__()
        self.dim, self.vocab = dim, vocab
        rows = -(-vocab // pad_vocab) * pad_vocab
        self.embed_tokens = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed_tokens.weight, 0.0, dim ** -0.5)
        if rows > vocab:  # zero rows appended after the draws: the same init as unpadded
            self.embed_tokens.weight = nn.Parameter(torch.cat(
                [self.embed_tokens.weight.data, torch.zeros(rows - vocab, dim)]))
            self.embed_tokens.num_embeddings = rows
            self.register_buffer("logit_bias", torch.zeros(rows).masked_fill(
                torch.arange(rows) >= vocab, float("-inf")), persistent=False)
        else:
            self.logit_bias = None
        self.register_buffer("positions", sinusoidal_positions(max_len, dim))
        norm_args = dict(kind=norm, eps=norm_eps, alpha=norm_alpha, alpha_fwd=pn_alpha_fwd,
                         alpha_bkw=pn_alpha_bkw, pn_warmup=pn_warmup)
        self.layers = nn.ModuleList(
            [Block(dim, heads, ffn_dim, dropout, norm_args) for _ in range(layers)])
        self.layer_norm = make_norm(d=dim, **norm_args)

    def forward(self, tokens):
        T = tokens.shape[1]
        if T > self.positions.shape[0]:
            raise ValueError("sequence longer than the position table")
        h = self.embed_tokens(tokens) * math.sqrt(self.dim) + self.positions[:T]
        for block in self.layers:
            h = block(h)
        f = self.layer_norm(h)
        # tied; no bias but the padding's -inf. Rows [n T, d], so that F.linear is one addmm
        # with the bias in the GEMM's epilogue.
        logits = F.linear(f.reshape(-1, self.dim), self.embed_tokens.weight, self.logit_bias)
        return logits.view(h.shape[0], T, -1)


class LMWithLoss(nn.Module):
    """The LM and its loss as one module, so that torch.compile fuses the loss into the model's
    graph (the logits never stored in fp32) and DDP wraps both. forward(inp, tgt, eps) ->
    (loss sum, nll sum)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, inp, tgt, eps):
        return label_smoothed_loss(self.lm(inp), tgt, eps, vocab=self.lm.vocab)


def label_smoothed_loss(logits, targets, eps, mask=None, vocab=None):
    """fairseq's label-smoothed CE summed over tokens (kernels/cpu/loss.cpp):
    eps_i = eps / (V - 1); loss = (1 - eps - eps_i) nll + eps_i * sum_j (-lp_j).
    mask (translation): 0/1 per token, the padded tokens' terms dropped as pntrain drops them.
    vocab: V where the logits have padded columns beyond it (-inf). Without smoothing or a
    mask, PyTorch's fused cross-entropy. Returns (loss_sum, nll_sum)."""
    V = vocab or logits.shape[-1]
    flat = logits.reshape(-1, logits.shape[-1])
    if eps == 0 and mask is None:
        # .float() costs nothing that a plain model does not pay: CUDA's autocast runs
        # cross_entropy in fp32 (it casts bf16 logits to an fp32 copy itself), and under
        # torch.compile the cast is fused into the loss's kernels, never stored.
        nll = F.cross_entropy(flat.float(), targets.reshape(-1), reduction="sum")
        return nll, nll.detach()
    lp = torch.log_softmax(flat.float(), dim=-1)
    nll = -lp.gather(1, targets.reshape(-1, 1)).squeeze(1)
    if eps > 0:
        eps_i = eps / (V - 1) if V > 1 else 0.0
        smooth = -lp[:, :V].sum(-1)
        per_token = (1.0 - eps - eps_i) * nll + eps_i * smooth
    else:
        per_token = nll
    if mask is not None:
        m = mask.reshape(-1).to(per_token.dtype)
        per_token, nll = per_token * m, nll * m
    return per_token.sum(), nll.detach().sum()


# ---------------------------------------------------------------- translation model

NORM_SITES = ("encoder-norm-self", "encoder-norm-ff", "encoder-norm-final", "decoder-norm-self",
              "decoder-norm-cross", "decoder-norm-ff", "decoder-norm-final")


def apply_norm(norm, x, rows_mask):
    """A norm on x [n, T, d] whose padded rows must stay out of batch statistics: the
    batch-type twins take the [n*T, 1] row mask, nn.LayerNorm (per row) needs none."""
    return norm(x) if isinstance(norm, nn.LayerNorm) else norm(x, rows_mask)


def attend(q, k, v, causal, key_mask, dropout_p):
    """layers/attention.cpp MultiheadAttention's core on q [n, h, Tq, dh], k, v [n, h, Tk, dh]:
    softmax(q k^T / sqrt(dh)) over the allowed keys (j <= i when causal; key_mask [n, Tk] bool,
    True = real token), probabilities dropped with dropout_p (inverted), times v."""
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2
        mask = None if key_mask is None else key_mask[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=causal)
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        Tq, Tk = scores.shape[-2:]
        banned = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(banned, float("-inf"))
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    probs = F.dropout(torch.softmax(scores, dim=-1), dropout_p)
    return torch.matmul(probs, v)


class MultiheadAttention(nn.Module):
    """layers/attention.h MultiheadAttention: self-attention with one fused [3d, d] qkv_proj
    (rows q, k, v), optionally causal, or cross-attention with q_proj [d, d] on the decoder and
    one fused kv_proj [2d, d] (rows k, v) on the encoder output; heads are column blocks of
    d/heads; keys may carry a padding mask; out_proj."""

    def __init__(self, d, heads, cross=False, causal=False, attention_dropout=0.0):
        super().__init__()
        assert d % heads == 0
        self.d, self.heads, self.cross, self.causal = d, heads, cross, causal
        self.attention_dropout = attention_dropout
        if cross:
            self.q_proj = _xavier_linear(d, d)
            self.kv_proj = _xavier_linear(d, 2 * d)
        else:
            self.qkv_proj = _xavier_linear(d, 3 * d)
        self.out_proj = _xavier_linear(d, d)

    def _heads(self, z, parts):
        n, T, _ = z.shape
        return z.view(n, T, parts, self.heads, self.d // self.heads).permute(2, 0, 3, 1, 4)

    def forward(self, x, mem=None, key_mask=None):
        n, Tq, d = x.shape
        if self.cross:
            q = self._heads(self.q_proj(x), 1)[0]
            k, v = self._heads(self.kv_proj(mem), 2)
        else:
            q, k, v = self._heads(self.qkv_proj(x), 3)
        p = self.attention_dropout if self.training else 0.0
        ctx = attend(q, k, v, self.causal, key_mask, p)
        return self.out_proj(ctx.transpose(1, 2).reshape(n, Tq, d))


class EncoderLayer(nn.Module):
    """m = h + dropout(self_attn(norm_self(h), source key mask));
    h = m + dropout(ff(norm_ff(m)))."""

    def __init__(self, d, heads, ffn_dim, dropout, attention_dropout, norm_self, norm_ff):
        super().__init__()
        self.self_attn_layer_norm = norm_self
        self.self_attn = MultiheadAttention(d, heads, attention_dropout=attention_dropout)
        self.final_layer_norm = norm_ff
        self.fc1, self.fc2 = _xavier_linear(d, ffn_dim), _xavier_linear(ffn_dim, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h, key_mask, rows_mask):
        a = apply_norm(self.self_attn_layer_norm, h, rows_mask)
        m = h + self.dropout(self.self_attn(a, key_mask=key_mask))
        b = apply_norm(self.final_layer_norm, m, rows_mask)
        return m + self.dropout(self.fc2(F.relu(self.fc1(b))))


class DecoderLayer(nn.Module):
    """m1 = g + dropout(causal self_attn(norm_self(g)));
    m2 = m1 + dropout(encoder_attn(norm_cross(m1), enc, source key mask));
    g = m2 + dropout(ff(norm_ff(m2)))."""

    def __init__(self, d, heads, ffn_dim, dropout, attention_dropout, norm_self, norm_cross,
                 norm_ff):
        super().__init__()
        self.self_attn_layer_norm = norm_self
        self.self_attn = MultiheadAttention(d, heads, causal=True,
                                            attention_dropout=attention_dropout)
        self.encoder_attn_layer_norm = norm_cross
        self.encoder_attn = MultiheadAttention(d, heads, cross=True,
                                               attention_dropout=attention_dropout)
        self.final_layer_norm = norm_ff
        self.fc1, self.fc2 = _xavier_linear(d, ffn_dim), _xavier_linear(ffn_dim, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, g, enc, src_key_mask, rows_mask):
        a = apply_norm(self.self_attn_layer_norm, g, rows_mask)
        m1 = g + self.dropout(self.self_attn(a))
        c = apply_norm(self.encoder_attn_layer_norm, m1, rows_mask)
        m2 = m1 + self.dropout(self.encoder_attn(c, enc, src_key_mask))
        b = apply_norm(self.final_layer_norm, m2, rows_mask)
        return m2 + self.dropout(self.fc2(F.relu(self.fc1(b))))


def _embedding(vocab, d):
    """layers/embedding.cpp: a [vocab, d] table, N(0, d^-1/2) (no padding row is zeroed)."""
    e = nn.Embedding(vocab, d)
    nn.init.normal_(e.weight, 0.0, d ** -0.5)
    return e


class _Stack(nn.Module):
    """Holds one side's layers and final norm under pntrain's parameter names."""

    def __init__(self, layers, layer_norm, embed_tokens=None):
        super().__init__()
        if embed_tokens is not None:
            self.embed_tokens = embed_tokens
        self.layers = nn.ModuleList(layers)
        self.layer_norm = layer_norm


class TransformerMT(nn.Module):
    """PyTorch twin of pntrain's translation model (model/translation.cpp), pre-norm:
        encoder:  h0 = dropout(sqrt(d) E[src] + P)       (P from position 0, padding included)
                  EncoderLayer x encoder_layers;  enc = norm_enc_final(h)
        decoder:  g0 = dropout(sqrt(d) E_tgt[prev] + P)   (prev = <eos>, target without <eos>)
                  DecoderLayer x decoder_layers;  logits = norm_dec_final(g) E_tgt^T  (tied)
    share_all_embeddings: one joint table E = E_tgt (embed_tokens), else encoder.embed_tokens
    and decoder.embed_tokens. Padding is on the right; the source mask keys the encoder's
    self-attention and every cross-attention; the decoder's self-attention is causal (a real
    target token never sees the padding after it); every batch-type norm takes its side's row
    mask. norms: kind per site (NORM_SITES: encoder-norm-self, ..., decoder-norm-final).
    Parameter names and shapes are pntrain's (its ParamStore names), so a `pn export` loads
    with load_pn_export. Init as pntrain's: see the module docstring."""

    def __init__(self, vocab, tgt_vocab=None, share_all_embeddings=True, dim=128,
                 encoder_layers=2, encoder_heads=4, encoder_ffn_dim=512, decoder_layers=2,
                 decoder_heads=4, decoder_ffn_dim=512, dropout=0.1, attention_dropout=0.0,
                 norms=None, max_len=1024, norm_eps=1e-5, norm_alpha=0.9, pn_alpha_fwd=0.9,
                 pn_alpha_bkw=0.9, pn_warmup=0):
        super().__init__()
        tgt_vocab = tgt_vocab or vocab
        if share_all_embeddings and tgt_vocab != vocab:
            raise ValueError("shared embeddings need one joint vocabulary")
        norms = dict({site: "layer" for site in NORM_SITES}, **(norms or {}))
        opts = dict(eps=norm_eps, alpha=norm_alpha, alpha_fwd=pn_alpha_fwd,
                    alpha_bkw=pn_alpha_bkw, pn_warmup=pn_warmup)

        def norm(site):
            return make_norm(norms[site], dim, **opts)
        self.dim, self.shared = dim, share_all_embeddings
        if share_all_embeddings:
            self.embed_tokens = _embedding(vocab, dim)
        self.encoder = _Stack(
            [EncoderLayer(dim, encoder_heads, encoder_ffn_dim, dropout, attention_dropout,
                          norm("encoder-norm-self"), norm("encoder-norm-ff"))
             for _ in range(encoder_layers)], norm("encoder-norm-final"),
            None if share_all_embeddings else _embedding(vocab, dim))
        self.decoder = _Stack(
            [DecoderLayer(dim, decoder_heads, decoder_ffn_dim, dropout, attention_dropout,
                          norm("decoder-norm-self"), norm("decoder-norm-cross"),
                          norm("decoder-norm-ff")) for _ in range(decoder_layers)],
            norm("decoder-norm-final"),
            None if share_all_embeddings else _embedding(tgt_vocab, dim))
        self.register_buffer("positions", sinusoidal_positions(max_len, dim))
        self.dropout = nn.Dropout(dropout)

    def embeddings(self):
        """(source table, target table): the same module when shared."""
        if self.shared:
            return self.embed_tokens, self.embed_tokens
        return self.encoder.embed_tokens, self.decoder.embed_tokens

    def _embed(self, table, tokens):
        T = tokens.shape[1]
        if T > self.positions.shape[0]:
            raise ValueError("sequence longer than the position table")
        return self.dropout(table(tokens) * math.sqrt(self.dim) + self.positions[:T])

    def forward(self, src, src_mask, prev, tgt_mask):
        """src [n, S], prev [n, T] token ids; src_mask, tgt_mask bool (True = real token).
        Returns the logits [n, T, V_tgt]."""
        e_src, e_tgt = self.embeddings()
        src_rows = src_mask.reshape(-1, 1).float()
        tgt_rows = tgt_mask.reshape(-1, 1).float()
        h = self._embed(e_src, src)
        for layer in self.encoder.layers:
            h = layer(h, src_mask, src_rows)
        enc = apply_norm(self.encoder.layer_norm, h, src_rows)
        g = self._embed(e_tgt, prev)
        for layer in self.decoder.layers:
            g = layer(g, enc, src_mask, tgt_rows)
        f = apply_norm(self.decoder.layer_norm, g, tgt_rows)
        return F.linear(f, e_tgt.weight)  # tied to the target embedding, no bias


def load_pn_export(model, tensors):
    """Copies the parameters of a `pn export` (python/pntrain_torch.py read_safetensors:
    fairseq names, qkv split into q/k/v) into a TransformerMT of the same sizes, fusing q|k|v
    and k|v back; the norms' running state is not taken (the twin starts from pntrain's initial
    state). Returns the number of parameters copied."""
    own = dict(model.named_parameters())
    done = set()
    for name, p in own.items():
        if name == "embed_tokens.weight":
            src = tensors["encoder.embed_tokens.weight"]
        elif ".qkv_proj." in name or ".kv_proj." in name:
            fused, kind = name.split(".qkv_proj." if ".qkv_proj." in name else ".kv_proj.")
            parts = "qkv" if ".qkv_proj." in name else "kv"
            src = torch.cat([tensors["%s.%s_proj.%s" % (fused, c, kind)] for c in parts])
        else:  # TokenBatchNorm keeps its parameters in .bn
            src = tensors[name.replace(".bn.", ".")]
        if tuple(src.shape) != tuple(p.shape):
            raise ValueError("%s: the export holds %s, the twin %s" % (name, list(src.shape),
                                                                      list(p.shape)))
        with torch.no_grad():
            p.copy_(src.to(p.dtype))
        done.add(name)
    return len(done)
