"""What the probe (probe_feed.py) tries, and the bar a pick must reach: its settings, and the candidate loader
configurations in the order it measures their ceilings. The bar is `fastest`'s for bench results too (choice.py)."""

from __future__ import annotations

from dataclasses import dataclass

MIN_VS_DATA_FREE = 0.99  # the bar a pick must reach: 99% of the data-free rate
MAX_STARVATION = 0.01  # and under 1% of the time waiting for input


@dataclass
class ProbeConfig:
    budget_s: float = 45.0  # start no further confirmation past this: with imports and the model, about a minute
    segment_s: float = 1.5  # measured seconds per window: dozens of compiled ddpm_cifar10 steps on a GPU
    min_steps: int = 5  # at least this many steps per window: a CPU step can take a second
    warmup: int = 10  # data-free steps first: compilation, CUDA-graph capture, cuDNN's autotuning (1 on CPU)
    loader_warmup: int = 8  # steps of a new loader left out: worker start and its prefetch queue filling (1 on CPU)
    ceiling_s: float = 0.5  # seconds of batches per ceiling after two warm-up batches: it only orders and rules out
    headroom: float = 0.10  # a ceiling must beat the data-free rate by this much: one that barely keeps up starves
    workers_cuda: tuple[int, ...] = (1, 4, 8)  # FFCV and DALI feed a GPU from 1 thread (findings 2, 3); files need 4+
    workers_cpu: tuple[int, ...] = (0, 2)  # a CPU device trains on the same cores the workers would use
    # a candidate that keeps up while keeping fewer cores than this busy at the model's rate ends the ceilings: no
    # other could save more (backends are tried in the order of bench.grid.job.LOADER_IMG_S, least host work first)
    enough_cores: float = 0.05

    @classmethod
    def for_device(cls, device: str) -> ProbeConfig:
        return cls() if device.startswith("cuda") else cls(warmup=1, loader_warmup=1, segment_s=2.0, min_steps=2)


def candidates(formats: dict, device: str, cores: int, cfg: ProbeConfig) -> list[list[tuple]]:
    """Per backend whose format is present (least host work per sample first), its (backend, workers, pin_memory)
    configurations, fewest workers first."""
    from loaders import NEEDS_FORMAT

    from ..grid.job import LOADER_IMG_S, collapse

    counts = cfg.workers_cuda if device.startswith("cuda") else cfg.workers_cpu
    out = []
    for b, fmt in sorted(NEEDS_FORMAT.items(), key=lambda bf: -LOADER_IMG_S[bf[0]]):
        if fmt in formats or (b == "gpu" and "files" in formats):
            configs = dict.fromkeys(collapse(b, min(w, cores), True, device, cores) for w in counts)
            out.append([(b, w, p) for w, p in configs])
    return out
