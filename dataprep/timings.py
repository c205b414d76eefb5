"""Where a conversion's time goes: seconds per stage and the process that spent them, kept in the manifest and
printed by `dataprep convert --timings`.

Stages in worker processes are CPU seconds summed over the workers (user and kernel: creating files is kernel time);
stages in the converting process and its helpers are wall seconds, waits included, so a stage that waited on the
workers shows it."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

MAIN = "converting process"


@dataclass
class Stage:
    seconds: float = 0.0
    where: str = MAIN
    kind: str = "wall"  # "wall": elapsed in one process; "cpu": CPU seconds summed over worker processes


def since_process_start() -> float:
    """Seconds since this process started: the interpreter, its imports and (under torchrun) the wait for it, which
    a short conversion can spend more time in than in converting."""
    import psutil

    return max(0.0, time.time() - psutil.Process().create_time())


class Timings(dict):
    """name -> Stage, in the order the stages first ran."""

    def add(self, name: str, seconds: float, where: str = MAIN, kind: str = "wall") -> None:
        stage = self.setdefault(name, Stage(0.0, where, kind))
        stage.seconds += seconds

    @contextmanager
    def timed(self, name: str, where: str = MAIN):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0, where)

    def as_dict(self) -> dict:
        return {name: asdict(s) | {"seconds": round(s.seconds, 3)} for name, s in self.items()}

    def table(self, wall_s: float, cpu_s: float) -> str:
        rows = [f"{'stage':<38} {'seconds':>8}  kind  where"]
        rows += [f"{name:<38} {s.seconds:8.2f}  {s.kind:<4}  {s.where}" for name, s in self.items()]
        rows.append(f"{'total':<38} {wall_s:8.2f}  wall  {cpu_s:.1f} CPU-s in the converting process")
        return "\n".join(rows)
