"""`train --loader fastest` and `bench fastest`: the loader configuration to train with. choice.py picks it from bench
results (the same data, device, model, batch size, precision and compile setting); with none, the probe measures the
candidates in one process, in the real training loop: probe_feed.py feeds that loop step by step and decides,
probe_run.py runs the loop on it and writes its windows as bench results, so the next call is instant.

    from bench.fastest import choose
    choose("data/cifar10", device="cuda", model="ddpm_cifar10", batch_size=128)
"""

from .choice import Choice, choose

__all__ = ["Choice", "choose"]
