#!/usr/bin/env bash
# The newcomer's path through README.md, in order, each step as the README types it: the demo's main job on synthetic
# images, the main job on a folder of real images, the object-storage section, the latent section on a CPU. Sizes
# come from the environment, so CI runs it small (tests/integration/test_newcomer_path.py) and a person full size:
#   IMAGES=path/to/image-folder scripts/newcomer_path.sh WORKDIR
# Object storage needs AWS_ENDPOINT_URL and friends (what `python -m bench.objectstore serve DIR` prints) and BUCKET;
# without them that section is skipped, and says so.
set -euo pipefail

WORK=${1:?usage: scripts/newcomer_path.sh WORKDIR}
IMAGES=${IMAGES:?IMAGES: a folder of images, one subfolder per class}
LIMIT=${LIMIT:-1024}      # images converted from the folder
STEPS=${STEPS:-24}        # training steps of each run
BENCH=${BENCH:---steps 8 --timing-warmup 2}  # the bench's steps per configuration
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }
# every run on the CPU, small: the bench's grid and train's CPU defaults (tiny, batch 32, fp32)
CPU=(--device cpu --precision fp32 --batch-size 16)

say "the demo's main job, on embedded synthetic images"
dataprep convert --source synthetic-images --limit "$LIMIT" --format hdf5 --out "$WORK/demo" --overwrite --no-progress
dataprep verify "$WORK/demo"
bench loaders --data "$WORK/demo" "${CPU[@]}" --backends hdf5,gpu --workers 0,1 $BENCH --no-progress
bench report "$WORK/demo/.gpufeed-bench"
train --data "$WORK/demo" --loader fastest "${CPU[@]}" --steps "$STEPS" --log-every 8 --no-progress --out "$WORK/demo-run"
python -m bench.report.demo "$WORK/demo/.gpufeed-bench" "$WORK/demo-run"

say "the main job on a folder of real images"
dataprep convert --input "$IMAGES" --limit "$LIMIT" --format hdf5 --out "$WORK/mine" --no-progress
dataprep info "$WORK/mine"
bench loaders --data "$WORK/mine" "${CPU[@]}" --backends hdf5,gpu --workers 0,1 $BENCH --no-progress
train --data "$WORK/mine" --loader fastest "${CPU[@]}" --steps "$STEPS" --no-progress --out "$WORK/mine-run"
bench fastest --data "$WORK/mine" "${CPU[@]}"

say "data in object storage"
if [[ -n "${AWS_ENDPOINT_URL:-}" && -n "${BUCKET:-}" ]]; then
    dataprep convert --input "$IMAGES" --limit "$LIMIT" --format hdf5,stream --out "s3://$BUCKET/cifar10" --no-progress
    dataprep info "s3://$BUCKET/cifar10"
    train --data "s3://$BUCKET/cifar10" --loader stream --cache-limit 25GB "${CPU[@]}" --steps "$STEPS" \
        --no-progress --out "$WORK/s3-run"
    bench fastest --data "s3://$BUCKET/cifar10" "${CPU[@]}"
else
    echo "skipped: no store (run python -m bench.objectstore serve DIR, paste its exports, set BUCKET=gpufeed)"
fi

say "latent diffusion on a CPU, with an autoencoder made here"
dataprep make-vae "$WORK/vae" --shape tiny
dataprep convert --input "$IMAGES" --limit "$LIMIT" --format hdf5 --vae "$WORK/vae" --device cpu \
    --out "$WORK/latents" --no-progress
train --data "$WORK/latents" --loader hdf5 "${CPU[@]}" --steps "$STEPS" --no-progress --out "$WORK/latent-run"
say "done: every step of the path ran"
