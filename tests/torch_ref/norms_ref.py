"""PyTorch float64 reference of pntrain's norm layers (docs/contract.md §2 and §3).

Exact-gradient layers (layer, rms, group, dyt, batch, power_v, optional pre-scaling) use autograd of
L = sum over unmasked rows of y * dy, whose gradient is the contract's: masked rows' dx = 0 and they
enter no statistic or parameter gradient. PN (power, sync_power) is the contract's pseudo-code (docs/contract.md §2) written
out, both variants (paper, authors). A sync_* layer is its local twin over all ranks' rows at once.
"""
import numpy as np
import torch

BATCH_TYPE = {"batch", "sync_batch", "power_v", "sync_power_v", "power", "sync_power"}
ROW_LOCAL = ("layer", "rms", "group", "dyt")  # no statistic across rows


class Options:
    def __init__(self, kind, eps=1e-5, alpha=0.9, alpha_fwd=0.9, alpha_bkw=0.9, warmup=0,
                 groups=1, prescale_groups=0, pn_variant="paper", dyt_alpha=0.5):
        self.kind, self.eps, self.alpha = kind, eps, alpha
        self.pn_variant = pn_variant
        self.alpha_fwd, self.alpha_bkw, self.warmup = alpha_fwd, alpha_bkw, warmup
        self.groups, self.prescale_groups = groups, prescale_groups
        self.dyt_alpha = dyt_alpha


def _prescale(x, o):
    if o.prescale_groups <= 0 or o.kind not in BATCH_TYPE:
        return x
    n, d = x.shape
    g = o.prescale_groups
    xv = x.view(n, g, d // g)
    return (xv / torch.sqrt((xv * xv).mean(-1, keepdim=True) + o.eps)).view(n, d)


class Ref:
    """One layer with its running state; step() is one training iteration."""

    def __init__(self, o, d, gamma, beta):
        self.o, self.d = o, d
        self.gamma = torch.tensor(gamma, dtype=torch.float64)
        self.beta = torch.tensor(beta, dtype=torch.float64)
        self.alpha = torch.tensor([o.dyt_alpha], dtype=torch.float64)
        self.dalpha = np.zeros(1)  # DyT's da of the last step
        kind = o.kind.replace("sync_", "")
        self.base = kind
        self.state = {}
        if kind == "batch":
            self.state = {"running_mean": torch.zeros(d, dtype=torch.float64),
                          "running_var": torch.ones(d, dtype=torch.float64)}
        elif kind == "power_v":
            self.state = {"running_psi2": torch.ones(d, dtype=torch.float64)}
        elif kind == "power":
            self.state = {"running_psi2": torch.ones(d, dtype=torch.float64),
                          "nu": torch.zeros(d, dtype=torch.float64)}
            self.t = 0

    def _per_row(self, x, gamma, beta, alpha=None):
        o, d = self.o, self.d
        if self.base == "layer":
            return torch.nn.functional.layer_norm(x, (d,), gamma, beta, o.eps)
        if self.base == "rms":
            return gamma * x / torch.sqrt((x * x).mean(-1, keepdim=True) + o.eps)
        if self.base == "group":
            n, g = x.shape[0], o.groups
            xv = x.view(n, g, d // g)
            mu = xv.mean(-1, keepdim=True)
            var = ((xv - mu) ** 2).mean(-1, keepdim=True)
            return ((xv - mu) / torch.sqrt(var + o.eps)).view(n, d) * gamma + beta
        if self.base == "dyt":
            return gamma * torch.tanh(alpha * x) + beta
        raise ValueError(self.base)

    def infer(self, x_np):
        x = torch.tensor(x_np, dtype=torch.float64)
        o, st = self.o, self.state
        with torch.no_grad():
            if self.base in ROW_LOCAL:
                return self._per_row(x, self.gamma, self.beta, self.alpha).numpy()
            z = _prescale(x, o)
            if self.base == "batch":
                y = self.gamma * (z - st["running_mean"]) / torch.sqrt(st["running_var"] + o.eps)
            else:
                y = self.gamma * z / torch.sqrt(st["running_psi2"] + o.eps)
            return (y + self.beta).numpy()

    def step(self, x_np, dy_np, m_np):
        """Returns y, dx, dgamma, dbeta (numpy) and updates the state."""
        o, st = self.o, self.state
        m = torch.tensor(m_np, dtype=torch.bool)
        n = x_np.shape[0]
        B = int(m.sum())
        if self.base == "power":
            return self._pn_step(x_np, dy_np, m_np)
        if self.base in BATCH_TYPE and B == 0:  # empty statistics batch
            zeros = np.zeros(self.d)
            return self.infer(x_np), np.zeros_like(x_np), zeros, zeros
        x = torch.tensor(x_np, dtype=torch.float64, requires_grad=True)
        gamma = self.gamma.clone().requires_grad_(True)
        beta = self.beta.clone().requires_grad_(True)
        alpha = self.alpha.clone().requires_grad_(True)
        dy = torch.tensor(dy_np, dtype=torch.float64)
        if self.base in ROW_LOCAL:
            y = self._per_row(x, gamma, beta, alpha)
        else:
            z = _prescale(x, o)
            S = z[m]
            if self.base == "batch":
                mu = S.mean(0)
                var = ((S - mu) ** 2).mean(0)
                y = gamma * (z - mu) / torch.sqrt(var + o.eps) + beta
                with torch.no_grad():
                    st["running_mean"] = o.alpha * st["running_mean"] + (1 - o.alpha) * mu
                    st["running_var"] = o.alpha * st["running_var"] + (1 - o.alpha) * var
            else:  # power_v
                psi2 = (S * S).mean(0)
                y = gamma * z / torch.sqrt(psi2 + o.eps) + beta
                with torch.no_grad():
                    st["running_psi2"] = o.alpha * st["running_psi2"] + (1 - o.alpha) * psi2
        loss = (y * dy * m.to(torch.float64)[:, None]).sum()
        loss.backward()
        dbeta = beta.grad.numpy() if self.base != "rms" else np.zeros(self.d)
        self.dalpha = alpha.grad.numpy() if alpha.grad is not None else np.zeros(1)
        return y.detach().numpy(), x.grad.numpy(), gamma.grad.numpy(), dbeta

    def _pn_step(self, x_np, dy_np, m_np):
        o, st = self.o, self.state
        x = np.asarray(x_np, dtype=np.float64)
        dy = np.asarray(dy_np, dtype=np.float64)
        m = np.asarray(m_np, dtype=bool)
        g_, b_ = self.gamma.numpy(), self.beta.numpy()
        psi2, nu = st["running_psi2"].numpy().copy(), st["nu"].numpy().copy()
        B = int(m.sum())
        if B == 0:
            return self.infer(x_np), np.zeros_like(x), np.zeros(self.d), np.zeros(self.d)
        self.t += 1
        t = self.t
        psi2_b = (x[m] ** 2).mean(0)
        s = np.sqrt((psi2_b if t <= o.warmup else psi2) + o.eps)
        xh = x / s
        y = g_ * xh + b_
        g = g_ * dy
        if o.pn_variant == "authors":  # contract: PN as the authors' public code computes it
            if t < o.warmup:
                psi2 = psi2 + (psi2_b - psi2) / t
            psi2 = o.alpha_fwd * psi2 + (1 - o.alpha_fwd) * psi2_b
            xhp = g - (1 - o.alpha_bkw) * nu * xh
            nu = nu + (xhp[m] * xh[m]).mean(0)
            dx = xhp / np.sqrt(psi2_b + o.eps)
            dx[~m] = 0
            st["running_psi2"], st["nu"] = torch.tensor(psi2), torch.tensor(nu)
            return y, dx, (dy[m] * xh[m]).sum(0), dy[m].sum(0)
        psi2 = psi2 + (psi2_b - psi2) / t if t <= o.warmup else \
            o.alpha_fwd * psi2 + (1 - o.alpha_fwd) * psi2_b
        dx = (g - nu * xh) / s
        dx[~m] = 0
        Gam = (xh[m] ** 2).mean(0)
        Lam = (g[m] * xh[m]).mean(0)
        nu = nu * (1 - (1 - o.alpha_bkw) * Gam) + (1 - o.alpha_bkw) * Lam
        st["running_psi2"], st["nu"] = torch.tensor(psi2), torch.tensor(nu)
        return y, dx, (dy[m] * xh[m]).sum(0), dy[m].sum(0)


def run(o, X, DY, M, gamma, beta, ranks=1, group_size=None):
    """What pnnorm writes for R ranks: y, dx (T,N,d), dgamma, dbeta (T,d), dalpha (T,1) summed
    over ranks, y_eval (N,d), and per rank {name: (T,d)} states. A sync_* layer with group_size K takes its
    statistics over the rows of each group of K consecutive ranks alone (--sync-group-size)."""
    T, N, d = X.shape
    K = group_size or ranks
    rows = [(r * N // ranks, (r + 1) * N // ranks) for r in range(ranks)]
    if o.kind.startswith("sync_"):
        shards = [(rows[g * K][0], rows[g * K + K - 1][1]) for g in range(ranks // K)]
    elif o.kind in ROW_LOCAL:
        shards = [(0, N)]
    else:
        shards = rows
    out = {"y": np.zeros((T, N, d)), "dx": np.zeros((T, N, d)), "dgamma": np.zeros((T, d)),
           "dbeta": np.zeros((T, d)), "dalpha": np.zeros((T, 1)), "y_eval": np.zeros((N, d))}
    states = []
    for lo, hi in shards:
        ref = Ref(o, d, gamma, beta)
        st = {k: np.zeros((T, d)) for k in ref.state}
        for t in range(T):
            y, dx, dg, db = ref.step(X[t, lo:hi], DY[t, lo:hi], M[t, lo:hi])
            out["y"][t, lo:hi], out["dx"][t, lo:hi] = y, dx
            out["dgamma"][t] += dg
            out["dbeta"][t] += db
            out["dalpha"][t] += ref.dalpha
            for k, v in ref.state.items():
                st[k][t] = v.numpy()
        if hi > lo:
            out["y_eval"][lo:hi] = ref.infer(X[T - 1, lo:hi])
        states.append(st)
    if o.kind.startswith("sync_"):
        rank_states = [states[r // K] for r in range(ranks)]
    elif o.kind in ROW_LOCAL:
        rank_states = [states[0]] * ranks
    else:
        rank_states = states
    return out, rank_states
