"""PyTorch twin of pntrain's language model (SPEC section 8), for bench/vs_pytorch.

Pre-norm Transformer decoder, as model/lm.cpp:
    h0 = sqrt(d) E[tok] + P[pos]           (P sinusoidal [sin | cos], freq 10000^(-i/(d/2-1)))
    per block: m = h + dropout(attn(norm_self(h)));  h = m + dropout(ff(norm_ff(m)))
    logits = norm_final(h) E^T             (tied output projection, no bias)
Init as pntrain: E ~ N(0, d^-1/2); linear weights Xavier uniform on [out, in] (the fused qkv
projection is one [3d, d] matrix), biases 0; norm gamma 1, beta 0.
Loss: fairseq's label-smoothed cross-entropy (kernels/cpu/loss.cpp), summed over tokens.

Norms (SPEC section 2, the model's rows are its tokens, training rows are never masked):
  layer: nn.LayerNorm;  batch: nn.BatchNorm1d over the [tokens, d] view (statistics over all
  tokens of the micro-batch);  power: PowerNorm below (layers/norms/power_norm.h).
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
    """PN training iteration of layers/norms/power_norm.h on x [rows, d] (no masked rows).

    forward:  t += 1; psi_B^2 = mean x^2; s = sqrt(psi_B^2 + eps) if t <= W else
              sqrt(psi^2 + eps) (psi^2 before this iteration); y = gamma x / s + beta;
              psi^2 <- cumulative mean (t <= W) or alpha_fwd psi^2 + (1 - alpha_fwd) psi_B^2
    backward: g = gamma dy; dx = (g - nu xh) / s with nu before this iteration;
              Gamma = mean xh^2, Lambda = mean g xh; nu <- nu (1 - (1-a_bkw) Gamma) + (1-a_bkw)
              Lambda; dgamma = sum dy xh; dbeta = sum dy
    The running state (psi^2, nu, t) lives in float64 buffers of the module, as in pntrain.
    """

    @staticmethod
    def forward(ctx, x, gamma, beta, module):
        rows = x.shape[0]
        # t is a tensor and the warmup a select, not a Python branch, so that torch.compile
        # traces one graph for every iteration instead of recompiling as t counts up.
        module.t.add_(1)
        sum_x2 = (x * x).sum(0, dtype=torch.float64)
        psi2_b = sum_x2 / rows
        warm = module.t <= module.warmup
        psi2 = module.running_psi2
        inv_s = torch.rsqrt(torch.where(warm, psi2_b, psi2) + module.eps)
        module.running_psi2.copy_(torch.where(warm, psi2 + (psi2_b - psi2) / module.t,
                                              module.alpha_fwd * psi2 +
                                              (1 - module.alpha_fwd) * psi2_b))
        inv_s32 = inv_s.to(x.dtype)
        y = torch.addcmul(beta, x, inv_s32 * gamma)
        ctx.save_for_backward(x, gamma, inv_s32)
        ctx.module = module
        ctx.gamma_term = (sum_x2 * inv_s * inv_s / rows)  # Gamma = mean xh^2
        return y

    @staticmethod
    def backward(ctx, dy):
        x, gamma, inv_s = ctx.saved_tensors
        module = ctx.module
        rows = x.shape[0]
        xh = x * inv_s
        sum_dy_xh = (dy * xh).sum(0, dtype=torch.float64)
        dbeta = dy.sum(0)
        dgamma = sum_dy_xh.to(dy.dtype)
        nu = module.nu.to(dy.dtype)
        # dx = (gamma dy - nu xh) / s, nu before this iteration
        dx = (dy * gamma - xh * nu) * inv_s
        lam = gamma.detach().double() * sum_dy_xh / rows
        a = 1 - module.alpha_bkw
        module.nu.mul_(1 - a * ctx.gamma_term).add_(a * lam)
        return dx, dgamma, dbeta, None


class PowerNorm(nn.Module):
    def __init__(self, d, eps=1e-5, alpha_fwd=0.9, alpha_bkw=0.9, warmup=0):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps, self.alpha_fwd, self.alpha_bkw, self.warmup = eps, alpha_fwd, alpha_bkw, warmup
        self.register_buffer("running_psi2", torch.ones(d, dtype=torch.float64))
        self.register_buffer("nu", torch.zeros(d, dtype=torch.float64))
        self.register_buffer("t", torch.zeros((), dtype=torch.float64))  # training forwards

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if self.training:
            y = PowerNormFunction.apply(x2, self.weight, self.bias, self)
        else:
            inv = torch.rsqrt(self.running_psi2 + self.eps).to(x.dtype)
            y = torch.addcmul(self.bias, x2, inv * self.weight)
        return y.reshape(shape)


class TokenBatchNorm(nn.Module):
    """BatchNorm over every token of the micro-batch: x [nseq, T, d] seen as [nseq*T, d]."""

    def __init__(self, d, eps=1e-5, alpha=0.9):
        super().__init__()
        self.bn = nn.BatchNorm1d(d, eps=eps, momentum=1 - alpha)

    def forward(self, x):
        shape = x.shape
        return self.bn(x.reshape(-1, shape[-1])).reshape(shape)


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
    def __init__(self, vocab, layers=2, dim=256, heads=4, ffn_dim=1024, max_len=64,
                 dropout=0.1, norm="layer", norm_eps=1e-5, norm_alpha=0.9, pn_alpha_fwd=0.9,
                 pn_alpha_bkw=0.9, pn_warmup=0):
        super().__init__()
        self.dim = dim
        self.embed_tokens = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed_tokens.weight, 0.0, dim ** -0.5)
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
        return F.linear(f, self.embed_tokens.weight)  # tied, no bias


def label_smoothed_loss(logits, targets, eps):
    """fairseq's label-smoothed CE summed over tokens (kernels/cpu/loss.cpp):
    eps_i = eps / (V - 1); loss = (1 - eps - eps_i) nll + eps_i * sum_j (-lp_j).
    Returns (loss_sum, nll_sum)."""
    V = logits.shape[-1]
    lp = torch.log_softmax(logits.reshape(-1, V), dim=-1)
    nll = -lp.gather(1, targets.reshape(-1, 1)).squeeze(1)
    if eps > 0:
        eps_i = eps / (V - 1) if V > 1 else 0.0
        smooth = -lp.sum(-1)
        loss = ((1.0 - eps - eps_i) * nll + eps_i * smooth).sum()
    else:
        loss = nll.sum()
    return loss, nll.detach().sum()
