"""A configuration in words: how input-bound it was against the data-free rate, which rank made the others wait, and
the single knob change in its grid that raised the rate beyond the run-to-run spread (thresholds: thresholds.py)."""

from __future__ import annotations

from .rows import KNOBS
from .thresholds import BEHIND, EPOCH_STARTS, HIGHLY, INPUT_BOUND, NOISE, UNEXPLAINED


def explained(g: dict) -> float | None:
    """How much of the rate lost against the data-free rate (1 - vs_data_free) the time some rank waited for its
    input accounts for, under several ranks; None where nothing was lost beyond NOISE or a figure is missing."""
    any_rank, ratio = g.get("starvation_any"), g.get("vs_data_free")
    if any_rank is None or ratio is None or 1 - ratio <= NOISE:
        return None
    return any_rank / (1 - ratio)


def _ranks_waited(g: dict) -> str:
    """Under several ranks, who made the others wait (the headline is already the time every rank lost to it) and
    how much of the lost rate that explains; else nothing."""
    if g.get("starvation_any") is None or g.get("waited_on_rank") is None or g["starvation_any"] < NOISE / 2:
        return ""  # under 1% of the time: nobody was held long enough to name
    rank, share = g["waited_on_rank"], g["waited_on_share"]
    text = (
        f"; under {g['nproc']} ranks every rank waited at the all-reduce while some rank waited for its input "
        f"(rank {rank}: {share:.0%} of that time)"
    )
    if g.get("starvation_explains") is not None:
        text += f", {g['starvation_explains']:.0%} of the rate lost against the data-free rate"
    return text


def _epoch_starts(g: dict) -> str:
    """Where most of the waiting fell at the first batch of an epoch, that; else nothing."""
    share = g.get("epoch_start_idle")
    if share is None or share < EPOCH_STARTS or g["starvation"] < NOISE / 2:
        return ""
    text = f"; {share:.0%} of that at the first batch of an epoch, where the loader starts again"
    if g.get("backend") == "torch":
        text += " (a DataLoader starts its worker processes again each epoch unless persistent_workers=True)"
    return text


def label(g: dict) -> str:
    """A configuration in words: backend, workers, pin_memory (where they apply)."""
    from loaders import backend_label

    w = "" if g["workers"] is None else f", {g['workers']} worker{'s' * (g['workers'] != 1)}"
    pin = "" if g["pin_memory"] is None else f", pin_memory {'on' if g['pin_memory'] else 'off'}"
    return f"{backend_label(g['backend'], g.get('device') or '')}{w}{pin}"


def impossible_gap(groups: list[dict]) -> float:
    """How far the fastest configuration ran above the data-free rate, 0 when none did: no loader feeds a model faster
    than a batch already on the device, so the rates of these runs vary by at least this much (a busy machine, a
    data-free run slowed by something else)."""
    return max([0.0] + [g["vs_data_free"] - 1 for g in groups if g.get("vs_data_free")])


def best_change(g: dict, peers: list[dict], noise: float = NOISE) -> tuple[str, float] | None:
    """The single knob change (backend, workers or pin_memory) that raised the rate most, and by how much: by more
    than `noise` (NOISE, or more where the runs show more), and with every repeat above every repeat of this
    configuration (ranges that overlap are not a gain)."""
    best = None
    for knob in KNOBS:
        same_rest = [p for p in peers if p[knob] != g[knob] and all(p[k] == g[k] for k in KNOBS if k != knob)]
        if knob == "backend":  # other backends have other knobs: compare with their best configuration
            same_rest = [p for p in peers if p["backend"] != g["backend"]]
        for p in same_rest:
            gain = p["samples_per_s"] / g["samples_per_s"] - 1
            apart = p.get("samples_per_s_min", p["samples_per_s"]) > g.get("samples_per_s_max", g["samples_per_s"])
            if gain > noise and apart and (best is None or gain > best[1]):
                change = f"{knob} -> {p[knob]}" if knob != "backend" else f"backend -> {label(p)}"
                best = (change, gain)
    return best


def verdict(g: dict, peers: list[dict]) -> str:
    s, noise = g["starvation"], max(NOISE, impossible_gap(peers))
    if g["model"] == "none":
        head = f"loader ceiling {g['samples_per_s']:,.0f} samples/s"
        if g.get("headroom") is not None:  # what the loader delivers against what the preset eats here
            h, eater = g["headroom"], g["fed_model"]
            head += (
                f": feeds {h:,.1f}× what {eater} eats here"
                if h >= 1
                else f": {h:.0%} of what {eater} eats here, so it would starve it"
            )
    else:
        level = "highly input-bound" if s > HIGHLY else "input-bound" if s > INPUT_BOUND else "not input-bound"
        vs = f", {g['vs_data_free']:.0%} of the data-free rate" if g.get("vs_data_free") else ""
        if (g.get("vs_data_free") or 0) > 1 + NOISE:
            vs += f" (above it: the rates here vary by {noise:.0%} or more)"
        who = "GPU idle" if g["device"] == "cuda" else "training blocked"
        head = f"{level}: {who} {s:.1%} of the time waiting for input{vs}"
        head += _ranks_waited(g) + _epoch_starts(g)
        behind, ratio = g.get("host_behind"), g.get("vs_data_free")
        unexplained = ratio is not None and (1 - ratio) - s > UNEXPLAINED
        if s <= INPUT_BOUND and unexplained and behind is not None and behind >= BEHIND:
            head += f"; the host fell behind the GPU on {behind:.0%} of the steps"
            if (g.get("data_free_host_behind") or 0) >= BEHIND:  # the model alone keeps the host busier than the GPU
                head += (
                    ", as it does with no input at all: the step is bound by the host launching kernels, so "
                    "every millisecond the loader takes from the training process slows every step"
                )
            else:
                head += " (a synchronising copy, e.g. pin_memory off): the shortfall is inside the steps"
        elif s <= INPUT_BOUND and unexplained:
            head += (
                f"; yet {1 - ratio:.0%} of the data-free rate is lost, {(1 - ratio) - s:.0%} of it inside the steps, "
                "where the idle time between steps does not look"
            )
            if g.get("nvml_gpu_util_pct") is not None:
                head += f" (NVML saw the GPU busy {g['nvml_gpu_util_pct']:.0f}% of the time)"
    change = best_change(g, peers, noise)
    if change is None:
        return head + "; nothing in this grid did better beyond its run-to-run spread"
    gain = f"x{1 + change[1]:.1f}" if change[1] >= 1 else f"+{change[1]:.0%}"
    tail = f"; in this grid {change[0]} helped most ({gain} samples/s)"
    return head + tail
