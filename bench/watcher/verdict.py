"""Watch figures in words, with the thresholds `bench loaders` uses (bench/records/verdicts.py): input-bound above 5%
of the time waiting for input, highly above 20%; a host that lets the GPU drain before it even asks for the next batch
is named, with the usual causes, since no loader can fix that."""

from __future__ import annotations

from ..records.thresholds import BEHIND, EPOCH_STARTS, HIGHLY, INPUT_BOUND, NOISE


def live_line(step: int, f: dict) -> str:
    behind = "" if f["host_behind"] is None else f", host behind {f['host_behind']:.0%}"
    return (
        f"[gpufeed watch] step {step}: {f['samples_per_s']:,.0f} samples/s, starvation {f['starvation']:.1%}, "
        f"wait {f['wait_median_ms']:.1f} ms (p95 {f['wait_p95_ms']:.1f}){behind}"
    )


def level(starvation: float) -> str:
    if starvation > HIGHLY:
        return "highly input-bound"
    return "input-bound" if starvation > INPUT_BOUND else "not input-bound"


def verdict(f: dict, vs_data_free: float | None = None) -> str:
    """One paragraph: the level, what the GPU did, the share of the data-free rate and where the rest went."""
    s = f["starvation"]
    who = "the GPU sat idle" if f["source"] == "cuda-events" else "training was blocked"
    words = [f"{level(s)}: {who} {s:.1%} of the time waiting for the next batch"]
    starts = f.get("epoch_start_idle")
    at_starts = starts is not None and starts >= EPOCH_STARTS and s >= NOISE / 2
    if at_starts:
        words.append(
            f"{starts:.0%} of that at the first batch of an epoch, where the loader starts again: a DataLoader starts "
            "its worker processes again every epoch unless persistent_workers=True"
        )
    if vs_data_free is not None:
        other = max(0.0, 1 - vs_data_free - s)
        words.append(
            f"it runs at {vs_data_free:.0%} of its own data-free rate; of the shortfall, waiting for batches is "
            f"{min(s, max(0.0, 1 - vs_data_free)):.1%} of its time and the rest, {other:.1%}, is lost inside the steps "
            "(loader processes competing with the training process for cores, synchronising copies)"
            if vs_data_free < 1 - 0.01
            else f"it runs at {vs_data_free:.0%} of its own data-free rate: loading costs it nothing measurable"
        )
    drained = f.get("drained_at_request")
    if drained is not None and drained >= BEHIND:
        words.append(
            f"on {drained:.0%} of the steps the GPU had finished all queued work before the program asked for its "
            "next batch: the program waits for the GPU every step, so no loader can hide its wait. Usual causes: "
            "a .item() or .cpu() of the loss each step (log it every N steps, or copy it non_blocking into pinned "
            "memory and read it a step later), a copy from pageable memory (pin_memory=True and .to(device, "
            "non_blocking=True)), or a step too small to keep ahead of its own kernel launches (torch.compile with "
            "mode='reduce-overhead', a larger batch)"
        )
    elif s > INPUT_BOUND and not at_starts:  # more workers would start again each epoch too
        pin = ", pin_memory=True" if f["source"] == "cuda-events" else ""
        words.append(
            f"more loader workers (if cores are free){pin}, or a faster format and loader: "
            "`dataprep convert` then a gpufeed backend (`bench loaders` finds the fastest)"
        )
    return "; ".join(words)
