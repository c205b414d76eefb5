#!/bin/bash
# The newcomer's CPU path timed on an idle machine pinned to 2 cores, CUDA hidden (as on a machine without a GPU): the
# demo's steps (without FFCV's and DALI's formats, which the machine it ran on lacked), then `train --data LAT
# --steps 5` on latents of an SD-shaped autoencoder (random weights) at 256 px, twice. Run from the repository root on
# an idle machine with a GPU (the latents are encoded there): bash bench/studies/cpu_newcomer.sh 2>&1 | tee run.log
# Its output: bench/results/cpu_newcomer_2cores/run.log (docs/TRAINING.md, "On a CPU"; README, the demo's time).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=
T="taskset -c 0,1"
W=${SCRATCH:-/tmp/gpufeed-cpu-newcomer}; rm -rf $W; mkdir -p $W  # a scratch folder of its own
uptime; nproc; $T nproc; $T python3 -c "import torch, h5py, numba, diffusers; print('torch', torch.__version__, 'threads', torch.get_num_threads(), 'cuda', torch.cuda.is_available())"
lscpu | grep -i "model name"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
step() { local t0=$(ms); "$@"; local rc=$?; echo "=== rc=$rc $(( $(ms) - t0 )) ms: ${*:3:6}"; }
echo "##### demo steps (files,hdf5: no FFCV or DALI on this machine)"
T0=$(ms)
step $T python3 -m dataprep convert --source synthetic-images --limit 1024 --format files,hdf5 --output $W/demo/images --overwrite --quiet
step $T python3 -m dataprep verify $W/demo/images
step $T python3 -m bench loaders --data $W/demo/images --device cpu --pin-memory on --backends torch,hdf5,gpu --workers 0,2 --batch-size 32 --steps 8 --timing-warmup 2 --precision fp32 --no-progress
step $T python3 -m bench report $W/demo/images/.gpufeed-bench
step $T python3 -m training --data $W/demo/images --loader fastest --device cpu --steps 24 --log-every 8 --no-progress --out $W/demo/train
echo; $T python3 -m bench.report.demo $W/demo/images/.gpufeed-bench $W/demo/train
echo "=== demo after set-up: $(( $(ms) - T0 )) ms"
echo "##### latents: an SD-shaped autoencoder (random weights), 48 images at 256 px"
python3 -m bench.studies.latent_cache vaes $W/vaes > /dev/null
python3 - <<PY
import numpy as np
from PIL import Image
from pathlib import Path
rng = np.random.default_rng(0)
for c in ("cats", "dogs"):
    (Path("$W/photos") / c).mkdir(parents=True, exist_ok=True)
    for i in range(24):
        x = np.linspace(0, 255, 300)[None, :, None] * rng.random(3)[None, None, :] + rng.integers(0, 40, (300, 300, 3))
        Image.fromarray(x.clip(0, 255).astype(np.uint8)).save(f"$W/photos/{c}/{i}.jpg")
PY
CUDA_VISIBLE_DEVICES=0 python3 -m dataprep convert --input $W/photos --size 256 --vae $W/vaes/sd --output $W/lat256 --format files,hdf5 --device cuda --quiet
echo "##### train --data LAT --steps 5 on 2 cores, nothing else given"
step $T python3 -m training --data $W/lat256 --steps 5 --out $W/latrun --no-progress
echo "##### again, results of the first in place (fastest reads them)"
step $T python3 -m training --data $W/lat256 --steps 5 --out $W/latrun2 --no-progress
