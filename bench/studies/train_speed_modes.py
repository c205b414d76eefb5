"""The modes bench/studies/train_speed.py measures (its docstring says what each one is), and those a run takes when
--modes is not given."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .speedups import PREVIOUS

BF16 = torch.bfloat16


class Mode(NamedTuple):
    dtype: torch.dtype | None  # autocast dtype; None runs fp32 (TF32 matmuls and convolutions)
    channels_last: bool
    compile_mode: str | None = None  # torch.compile mode; None runs eager
    compiled: str = "model"  # what is compiled: the UNet as in training.loop, or the whole "loss"
    variants: tuple[str, ...] = ()  # bench.studies.speedups.PREVIOUS names (the forms before), or TORCH_GN
    inductor: tuple[tuple[str, object], ...] = ()  # torch._inductor.config settings while the mode compiles and runs


TORCH_GN = "torch_gn"  # PyTorch's own nn.GroupNorm in place of training.model.GroupNorm
COORDESC = (("coordinate_descent_tuning", True),)
CL_GRAPHS = (BF16, True, "reduce-overhead")
MODES = {
    "fp32_eager": Mode(None, False),
    "bf16_eager": Mode(BF16, False),
    "bf16_channels_last": Mode(BF16, True),
    "bf16_cl_compile": Mode(BF16, True, "default"),
    "bf16_cl_compile_cudagraphs": Mode(*CL_GRAPHS),
    "bf16_cl_cudagraphs_torch_gn": Mode(*CL_GRAPHS, variants=(TORCH_GN,)),
    "bf16_compile_cudagraphs": Mode(BF16, False, "reduce-overhead"),
    "bf16_cl_loss_cudagraphs": Mode(*CL_GRAPHS, compiled="loss"),
    "bf16_cl_max_autotune": Mode(BF16, True, "max-autotune"),
    "bf16_max_autotune": Mode(BF16, False, "max-autotune"),
    "bf16_cl_cudagraphs_prev_all": Mode(*CL_GRAPHS, variants=tuple(PREVIOUS)),
    "bf16_cl_cudagraphs_prev_gn": Mode(*CL_GRAPHS, variants=("gn_group_stats",)),
    "bf16_cl_cudagraphs_prev_cat": Mode(*CL_GRAPHS, variants=("cat_sliced_grad",)),
    "bf16_cl_cudagraphs_prev_upsample": Mode(*CL_GRAPHS, variants=("upsample_gather",)),
    "bf16_cl_cudagraphs_coordesc": Mode(*CL_GRAPHS, inductor=COORDESC),
}

# the default run stays near 6 minutes on an H100: max-autotune and coordinate-descent tuning add minutes of tuning per
# mode, and the single previous forms are for a closer look
GPU_DEFAULT = (
    "fp32_eager",
    "bf16_eager",
    "bf16_channels_last",
    "bf16_cl_compile",
    "bf16_cl_compile_cudagraphs",
    "bf16_cl_cudagraphs_prev_all",
    "bf16_cl_cudagraphs_torch_gn",
    "bf16_compile_cudagraphs",
    "bf16_cl_loss_cudagraphs",
)
CPU_DEFAULT = ("fp32_eager", "bf16_eager", "bf16_channels_last")  # compiling on 2 cores takes minutes
