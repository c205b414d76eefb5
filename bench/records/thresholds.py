"""Where a verdict in words changes: the thresholds `bench report` and `bench watch` judge starvation by. A module
of its own because `bench watch` loads it inside the programs it watches, which must import nothing else of gpufeed.

Input-bound thresholds follow TensorFlow's input-pipeline analyzer: above 5% of the time waiting for input a step
is input-bound, above 20% highly so."""

INPUT_BOUND, HIGHLY = 0.05, 0.20
NOISE = 0.02  # a knob must beat this configuration by more than the run-to-run spread to count as helping
# The host began most steps only after the GPU had finished the previous one (a copy from pageable memory, any call
# that waits for the GPU, or a step whose launches take longer than its kernels): the GPU then idles inside the steps
# too, which between-step starvation does not count. Said only when the shortfall from the data-free rate exceeds the
# starvation by more than UNEXPLAINED (3 points): with 0 workers the host is behind because it loads the batch itself,
# and that wait is already the starvation
BEHIND, UNEXPLAINED = 0.5, 0.03
# Other programs (or a hypervisor's steal) used more than this share of the cores a run may use: its rates are noise
BUSY = 0.10
# Most of the idle time fell at the first batch of an epoch (a DataLoader starting its worker processes again, a
# reader reopening its files): the verdict names epoch starts as the cause
EPOCH_STARTS = 0.5
