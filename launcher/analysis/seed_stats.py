"""Statistics over seeds for the reproduction reports, from scipy and statsmodels: mean and
sample standard deviation; the difference of two groups' means with Welch's 95% interval and
two-sided p (scipy.stats.ttest_ind, equal_var=False; the interval from the Welch-Satterthwaite
df and scipy.stats.t.ppf); Holm's adjusted p over a declared family (statsmodels'
multipletests); the difference detectable with 80% power at two-sided alpha 0.05 for the
observed spreads (scipy's noncentral t at the Welch df); and a paired t-test over the seeds two
groups share (scipy.stats.ttest_rel), where a seed fixes data order and initialisation.

As a command, two groups of finished cells (each a directory with the eval.json that reproduce
writes) compared as the reports compare norms: each cell's best validation and test perplexity
(marked where the best validation is the cell's last, i.e. capped by the budget), each group's
mean and standard deviation, and the first group's difference to the second with Welch's
interval, the paired test over shared seeds and the detectable difference. Cells whose
provenance differs in anything but the seed are refused unless --allow-mixed names the field:

    seed_stats.py [--allow-mixed FIELD]... LABEL_A 'CELLS_A' LABEL_B 'CELLS_B'
    (CELLS: a glob or a comma list)"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
import warnings

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.multitest import multipletests

ALPHA = 0.05
POWER = 0.8


def finite(vals):
    return [v for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]


def mean_sd(vals):
    """(mean, sample standard deviation, n) of the finite values; (None, None, 0) when none."""
    vals = finite(vals)
    if not vals:
        return None, None, 0
    return statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


def welch(a, b, level=0.95):
    """mean(a) - mean(b) with Welch's confidence interval: a dict of diff, lo, hi, df, p, na, nb,
    se; None when either sample has fewer than 2 values or both have no spread."""
    a, b = finite(a), finite(b)
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    va, vb = np.var(a, ddof=1) / na, np.var(b, ddof=1) / nb
    if va + vb == 0.0:
        return None
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    res = stats.ttest_ind(a, b, equal_var=False)
    diff = float(np.mean(a) - np.mean(b))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return {"diff": diff, "lo": diff - half, "hi": diff + half, "df": float(df),
            "p": float(res.pvalue), "na": na, "nb": nb, "se": se}


def holm(ps):
    """Holm's step-down adjusted p-values of a family, in its order (None stays None)."""
    idx = [i for i, p in enumerate(ps) if p is not None]
    out = [None] * len(ps)
    if idx:
        adj = multipletests([ps[i] for i in idx], alpha=ALPHA, method="holm")[1]
        for i, q in zip(idx, adj):
            out[i] = float(q)
    return out


def detectable(w, power=POWER, alpha=ALPHA):
    """The absolute difference of means a two-sided Welch test at alpha detects with the given
    power for the observed standard error and df (noncentral t); None without a comparison."""
    if w is None:
        return None
    df, se = w["df"], w["se"]
    crit = stats.t.ppf(1 - alpha / 2, df)

    def power_at(delta):
        nc = delta / se
        return stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc) - power

    with warnings.catch_warnings():  # boost's noncentral t warns far out in its tails
        warnings.simplefilter("ignore", RuntimeWarning)
        hi = (crit + 2.0) * se
        while power_at(hi) < 0:
            hi *= 2
        return float(optimize.brentq(power_at, 0.0, hi))


def paired(a_by_seed, b_by_seed):
    """The paired t-test over the seeds both {seed: value} maps have: a dict of diff (mean of
    the differences), p and n; None with fewer than 2 shared seeds or no spread."""
    seeds = sorted(set(a_by_seed) & set(b_by_seed))
    a = [a_by_seed[s] for s in seeds]
    b = [b_by_seed[s] for s in seeds]
    if len(seeds) < 2 or np.std(np.subtract(a, b)) == 0.0:
        return None
    res = stats.ttest_rel(a, b)
    return {"diff": float(np.mean(np.subtract(a, b))), "p": float(res.pvalue), "n": len(seeds),
            "seeds": seeds}


def compare(group, ref):
    """One comparison of {seed: value} maps: Welch's interval and p, the paired test, the
    detectable difference; the family's adjusted p is added by family()."""
    w = welch(list(group.values()), list(ref.values()))
    mr = mean_sd(list(ref.values()))[0]
    mg = mean_sd(list(group.values()))[0]
    return {"welch": w, "paired": paired(group, ref), "detectable": detectable(w),
            "diff": None if mg is None or mr is None else mg - mr,
            "diff_pct": None if mg is None or not mr else 100.0 * (mg / mr - 1), "p_adj": None}


def family(comparisons):
    """Adds Holm's adjusted p over the family (a list of compare() results) to each; returns
    the list."""
    adj = holm([c["welch"]["p"] if c["welch"] else None for c in comparisons])
    for c, q in zip(comparisons, adj):
        c["p_adj"] = q
    return comparisons


def strength(c, n_family):
    """The words a comparison's family-wise test allows."""
    if c["welch"] is None:
        return "no test (fewer than 2 seeds on a side)"
    p, q = c["welch"]["p"], c["p_adj"]
    if q is not None and q < ALPHA:
        return "established at alpha 0.05 after Holm over %d" % n_family if n_family > 1 else \
            "established at alpha 0.05"
    if p < ALPHA:
        return "suggestive, not established with %s seeds" % seeds_words(c)
    return "not distinguishable from seed noise with %s seeds" % seeds_words(c)


def seeds_words(c):
    w = c["welch"]
    return ("%d" % w["na"]) if w["na"] == w["nb"] else "%d and %d" % (w["na"], w["nb"])


def fmt_p(p):
    return "—" if p is None else ("%.3f" % p if p >= 0.001 else "%.1e" % p)


def describe_difference(label, ref_label, c, unit, n_family=1):
    """One sentence on a comparison: the difference, its interval, p and Holm's adjusted p,
    the paired test, the detectable difference, and the strength the family-wise test gives."""
    w = c["welch"]
    if w is None:
        return "%s − %s: fewer than 2 seeds on a side, no interval." % (label, ref_label)
    text = "%s − %s: %+.2f %s, 95%% CI [%+.2f, %+.2f] (Welch, df %.1f, p = %s" % (
        label, ref_label, w["diff"], unit, w["lo"], w["hi"], w["df"], fmt_p(w["p"]))
    if n_family > 1:
        text += ", %s after Holm over %d" % (fmt_p(c["p_adj"]), n_family)
    text += ", %d vs %d seeds)" % (w["na"], w["nb"])
    if c["paired"]:
        text += "; paired by seed p = %s over %d" % (fmt_p(c["paired"]["p"]), c["paired"]["n"])
    if c["detectable"] is not None:
        text += "; 80%% power at a difference of %.2f" % c["detectable"]
    return text + ": %s." % strength(c, n_family)


def capped(valid_curve, budget_end):
    """Whether a cell's best validation is its last evaluation and that evaluation is where the
    budget stopped it (training was still improving): valid_curve [(update, ppl)], budget_end
    the last update the budget allows (None: the last evaluation counts as the budget's)."""
    if not valid_curve:
        return False
    best = min(valid_curve, key=lambda p: p[1])[0]
    last = valid_curve[-1][0]
    return best == last and (budget_end is None or last >= budget_end)


def seed_of(cell_dir):
    m = re.search(r"_s(\d+)$", os.path.basename(os.path.normpath(cell_dir)))
    return int(m.group(1)) if m else None


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
        print("seed_stats: error: no finished cell (a directory with eval.json) matches '%s': "
              "give a glob or comma list of cell directories" % pattern, file=sys.stderr)
        sys.exit(2)
    return cells


def main(argv):
    from pn_metrics import read_metrics
    import provenance
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="seed_stats.py [--allow-mixed FIELD]... LABEL_A 'CELLS_A' "
                                      "LABEL_B 'CELLS_B'")
    p.add_argument("--allow-mixed", action="append", default=[], metavar="FIELD",
                   help="pool cells whose provenance differs in FIELD (repeatable): %s" %
                        ", ".join(provenance.FIELDS))
    p.add_argument("groups", nargs="*")
    a = p.parse_args(argv)
    if len(a.groups) != 4:
        p.print_usage(sys.stderr)
        print("seed_stats: error: two groups, each a LABEL and its CELLS (a glob or a comma list "
              "of cell directories)", file=sys.stderr)
        sys.exit(2)
    bad = [f for f in a.allow_mixed if f not in provenance.FIELDS]
    if bad:
        print("seed_stats: error: --allow-mixed %s: no such provenance field (choose from %s)" % (
            ",".join(bad), ", ".join(provenance.FIELDS)), file=sys.stderr)
        sys.exit(2)
    argv = a.groups
    groups = [(argv[0], cell_results(argv[1])), (argv[2], cell_results(argv[3]))]
    pooled = provenance.check_pool([(d, d) for _, cells in groups for d, _, _ in cells],
                                   a.allow_mixed, "seed_stats")
    for label, cells in groups:
        print("%s:" % label)
        for d, valid, test in cells:
            _, valids = read_metrics(os.path.join(d, "metrics.jsonl"))
            curve = [(v["update"], v["valid_ppl"]) for v in valids
                     if isinstance(v.get("valid_ppl"), (int, float))]
            print("  %s: best valid ppl %.2f, its test ppl %.2f%s" % (
                d, valid, test, " (capped: its best validation is its last)"
                if capped(curve, None) else ""))
        for what, k in (("test", 2), ("valid", 1)):
            m, sd, n = mean_sd([c[k] for c in cells])
            print("  %s ppl %.2f ± %.2f over %d" % (what, m, sd, n))
    for line in provenance.describe(pooled):
        print(line)
    (la, ca), (lb, cb) = groups
    for what, k in (("test ppl", 2), ("valid ppl", 1)):
        print(describe_difference(la, lb, compare(by_seed(ca, k), by_seed(cb, k)), what))


def by_seed(cells, k):
    """{seed: value k} of (dir, valid, test) cells, keyed by directory where seeds repeat (so
    that only cells of one seed are paired)."""
    seeds = [seed_of(c[0]) for c in cells]
    unique = None not in seeds and len(set(seeds)) == len(seeds)
    return {(s if unique else c[0]): c[k] for s, c in zip(seeds, cells)}

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1:])
