"""Statistics over seeds for the reproduction reports: mean and sample standard deviation, and
the difference of two norms' means with Welch's 95% confidence interval and two-sided p-value.
Standard library only (the GPU machine and CI have no scipy): Student's t distribution through
the regularized incomplete beta function, evaluated by its continued fraction.

As a command, two groups of finished cells (each a directory with the eval.json that reproduce
writes) compared as the reports compare norms: each cell's best validation and test perplexity,
each group's mean and standard deviation, and the first group's difference to the second with
Welch's interval, for cells that no report puts side by side:

    seed_stats.py LABEL_A 'CELLS_A' LABEL_B 'CELLS_B'    (CELLS: a glob or a comma list)"""
import glob
import json
import math
import os
import statistics
import sys


def finite(vals):
    return [v for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]


def mean_sd(vals):
    """(mean, sample standard deviation, n) of the finite values; (None, None, 0) when none."""
    vals = finite(vals)
    if not vals:
        return None, None, 0
    return statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


def _betacf(a, b, x):
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + \
        b * math.log(1.0 - x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_sf2(t, df):
    """P(|T| >= |t|) for Student's t with df (real, > 0) degrees of freedom."""
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p, df):
    """The p-quantile (p > 0.5) of Student's t with df degrees of freedom, by bisection."""
    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        if 1.0 - t_sf2(mid, df) / 2.0 < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def welch(a, b, level=0.95):
    """mean(a) - mean(b) with Welch's confidence interval: a dict of diff, lo, hi, df, p, na, nb;
    None when either sample has fewer than 2 values or both have no spread."""
    ma, sa, na = mean_sd(a)
    mb, sb, nb = mean_sd(b)
    if na < 2 or nb < 2:
        return None
    va, vb = sa * sa / na, sb * sb / nb
    if va + vb == 0.0:
        return None
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    diff = ma - mb
    return {"diff": diff, "lo": diff - half, "hi": diff + half, "df": df,
            "p": t_sf2(diff / se, df), "na": na, "nb": nb}


def describe_difference(label, ref_label, w, unit):
    """One sentence on a Welch comparison: the difference, its interval, and whether the
    interval excludes zero."""
    if w is None:
        return "%s − %s: fewer than 2 seeds on a side, no interval." % (label, ref_label)
    verdict = ("the interval excludes 0: %s is %s than %s beyond the seed spread" % (
        label, "lower" if w["diff"] < 0 else "higher", ref_label)
               if w["lo"] > 0 or w["hi"] < 0 else
               "the interval contains 0: not distinguishable from seed noise")
    return "%s − %s: %+.2f %s, 95%% CI [%+.2f, %+.2f] (Welch, df %.1f, p = %.3f, %d vs %d seeds); %s." % (
        label, ref_label, w["diff"], unit, w["lo"], w["hi"], w["df"], w["p"], w["na"], w["nb"],
        verdict)


def cell_results(pattern):
    """[(cell directory, best valid ppl, test ppl)] of the finished cells a glob or comma list
    names, sorted; exits with a message when none has finished."""
    dirs = sorted(set(d for part in pattern.split(",") for d in glob.glob(part.strip())))
    cells = []
    for d in dirs:
        try:
            with open(os.path.join(d, "eval.json")) as f:
                e = json.load(f)
            cells.append((d, e["valid_ppl"], e["test_ppl"]))
        except (OSError, ValueError, KeyError):
            print("seed_stats: %s has no finished eval.json: left out" % d, file=sys.stderr)
    if not cells:
        sys.exit("seed_stats: no finished cell (a directory with eval.json) matches '%s'" %
                 pattern)
    return cells


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: seed_stats.py LABEL_A 'CELLS_A' LABEL_B 'CELLS_B' (CELLS: a glob or a "
                 "comma list of cell directories)")
    groups = [(argv[0], cell_results(argv[1])), (argv[2], cell_results(argv[3]))]
    for label, cells in groups:
        print("%s:" % label)
        for d, valid, test in cells:
            print("  %s: best valid ppl %.2f, its test ppl %.2f" % (d, valid, test))
        for what, k in (("test", 2), ("valid", 1)):
            m, sd, n = mean_sd([c[k] for c in cells])
            print("  %s ppl %.2f ± %.2f over %d" % (what, m, sd, n))
    (la, a), (lb, b) = groups
    for what, k in (("test ppl", 2), ("valid ppl", 1)):
        print(describe_difference(la, lb, welch([c[k] for c in a], [c[k] for c in b]), what))


if __name__ == "__main__":
    main(sys.argv[1:])
