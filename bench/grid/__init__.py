"""`bench loaders`: the grid of loader configurations, each measured in the real training loop. job.py holds one
configuration and the grid's expansion; runner.py runs each in a fresh process (run_one.py), or under torchrun as N
data-parallel ranks whose records it merges (ranks.py); monitor.py says what a run costs the machine (CPU time and
memory of the process tree, NVML), crosscheck.py recomputes starvation from a profiler trace of the same steps."""
