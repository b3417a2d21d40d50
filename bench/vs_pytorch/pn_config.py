"""What the PyTorch scripts of this folder read of a pntrain config, without torch (compare.py
runs under any Python 3): the INI subset and the learning-rate schedule of trainer/schedule.h."""


def read_ini(path):
    """pntrain's INI subset: 'key = value' lines, '#' comments, no sections."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("[") and "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def learning_rate(cfg, update):
    """The config's schedule at update (1-based): linear warmup, then inverse_sqrt or fixed."""
    lr, init, W = cfg["lr"], cfg["warmup-init-lr"], cfg["warmup-updates"]
    if W > 0 and update < W:
        return init + (lr - init) * update / W
    if cfg["lr-scheduler"] == "inverse_sqrt" and W > 0:
        return lr * (W / update) ** 0.5
    return lr
