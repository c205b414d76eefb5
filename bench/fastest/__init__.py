"""`train --loader fastest` and `bench fastest`: the loader configuration to train with. choice.py picks it from bench
results (the same data, device, model, batch size, precision and compile setting); with none, probe.py measures the
candidates in one process, in the real training loop, and probe_run.py runs it and writes its windows as bench
results, so the next call is instant.

    from bench.fastest import choose
    choose("data/cifar10", device="cuda", model="ddpm_cifar10", batch_size=128)
"""

from .choice import Choice, choose

__all__ = ["Choice", "choose"]
