#!/usr/bin/env bash
# The GPU findings of docs/BENCHMARKS.md and the starvation cross-check, on one H100 (16 cores), in calls of at most
# 10 minutes each. Steps run in the order given, each resuming its results directory, until the call's minutes
# (GPUFEED_MINUTES, default 9) are spent: repeat the same command until it prints "complete" for every step.
#
#   bash bench/studies/plan_gpu.sh f1          # CIFAR-10, ddpm_cifar10 b128 bf16 compiled (CUDA graphs): the full grid
#   bash bench/studies/plan_gpu.sh f1rest      # f1, resuming the committed bench/results/f1_cifar10_bs128/ (its missing runs)
#   bash bench/studies/plan_gpu.sh f1host      # f1 at 4 workers, 1 repeat: is the host ahead of the GPU? (host_behind)
#   bash bench/studies/plan_gpu.sh f2 f3       # tiny b512 --cpus 4; spoken-digit audio, ddpm_audio_mel b128 --cpus 4
#   bash bench/studies/plan_gpu.sh xcheck      # profiler trace vs CUDA events, starved and fed runs
#   bash bench/studies/plan_gpu.sh gputest     # the CUDA cases of the test suite (pytest -m gpu), with the real data
#
# Grids, 2 repeats each (median and range; every repeat measures its own data-free rate):
# - f1: every backend x workers 0,4,8,16 x pin_memory on/off: 24 loader configurations + data-free = 52 runs,
#   200 measured steps after 20 warm-up. Measured: 35-45 s each with a warm compile cache (~20 s of it loading the
#   compiled graphs and capturing CUDA graphs), 160 s for the first on a fresh machine: ~36 min, 4-5 calls.
# - f2: tiny b512 on 4 cores, every backend, workers 0,3 (3 workers + the training process fill the 4 cores), 200
#   measured steps (a 7 s window; repeats still differ by up to +-13%: eager tiny is launch-bound on 4 cores, see
#   docs/BENCHMARKS.md). Measured: 27-49 s each, 13 min for the 20 runs.
# - f3: audio on 4 cores, the same backends and workers, eager (as the audio UNet trains by default), 60 measured
#   steps (0.18 s each: an 11 s window).
# Set-up: the package with its extras (ffcv, dali, audio) and the two dataset archives in ../shared/datasets,
# shared/datasets, .devdata or /work/shared/datasets. torch.compile is paid once per host: runs share
# TORCHINDUCTOR_CACHE_DIR (FX graph and AOT autograd caches).
# Results: $GPUFEED_RESULTS/<step>/ (default /tmp/gpufeed-results), archived to $OUT/<step>.tgz after every call (and
# every minute while it runs, with the step's log $OUT/<step>.log): one JSON per run, results.csv, results.md,
# plot-*.png, grid.log, fastest.txt (what `train --loader fastest` picks from them). xcheck's traces stay in
# $GPUFEED_RESULTS (tens of MB). If $GPUFEED_RESULTS is lost midway, unpack the last STEP.tgz into .devres/ (ignored):
# a step whose results are missing starts from .devres/STEP. Each run is paired with the data-free runs of its own GPU
# (uuid): a grid resumed on another GPU measures that GPU's data-free rate first (`bench loaders --resume` does it).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { echo "usage: bash bench/studies/plan_gpu.sh STEP... (prep f1 f1rest f1host f2 f3 xcheck gputest)" >&2; exit 2; }
OUT=${OUT:-$PWD/gpu-out}  # logs and archives of each step
RESULTS=${GPUFEED_RESULTS:-/tmp/gpufeed-results}
DATA=${GPUFEED_DATA:-/tmp/gpufeed-data}
MINUTES=${GPUFEED_MINUTES:-9}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpufeed-inductor}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export GPUFEED_COMMIT=${GPUFEED_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
PY=${PY:-python}

datasets() {
    for d in ../shared/datasets shared/datasets .devdata /work/shared/datasets; do
        [ -f "$d/cifar10-jpg.tar.gz" ] && { echo "$d"; return; }
    done
    echo "no cifar10-jpg.tar.gz in ../shared/datasets, shared/datasets, .devdata or /work/shared/datasets" >&2
    exit 1
}

prep() {  # ~1.3 min on 16 cores: real CIFAR-10 train (50,000) and FSDD (3,000 clips), every format
    local src
    src=$(datasets)
    mkdir -p "$DATA"
    if [ ! -f "$DATA/cifar10/manifest.json" ]; then
        [ -d "$DATA/raw/cifar" ] || { mkdir -p "$DATA/raw/cifar" && tar xzf "$src/cifar10-jpg.tar.gz" -C "$DATA/raw/cifar"; }
        $PY -m dataprep convert --input "$DATA/raw/cifar" --output "$DATA/cifar10" --format all --quiet
    fi
    if [ ! -f "$DATA/fsdd/manifest.json" ]; then
        [ -d "$DATA/raw/fsdd" ] || { mkdir -p "$DATA/raw/fsdd" && tar xzf "$src/fsdd-wav.tar.gz" -C "$DATA/raw/fsdd"; }
        $PY -m dataprep convert --input "$DATA/raw/fsdd/recordings" --output "$DATA/fsdd" --format all \
            --sample-rate 16000 --clip-seconds 1.024 --channels 1 --quiet
    fi
}

minutes_left() {  # what is left of this call, less ~25 s for the report, `fastest` and the archive
    $PY -c "print(f'{$MINUTES - $SECONDS / 60 - 0.4:.2f}')"
}

# bench STEP DATA MODEL BATCH ARGS...: resume the grid in $RESULTS/STEP within this call's minutes, report it, say
# what `fastest` picks once it is complete, archive it to $OUT/STEP.tgz.
bench() {
    local name=$1 data=$2 model=$3 batch=$4 left log status=0 complete=0 compile=False
    shift 4
    [[ " $* " != *" --compile "* ]] || compile=True  # `choose` must look for the grid's own compile setting
    left=$(minutes_left)
    [ -d "$RESULTS/$name" ] || [ ! -d ".devres/$name" ] || { mkdir -p "$RESULTS" && cp -r ".devres/$name" "$RESULTS/"; }
    mkdir -p "$OUT" "$RESULTS/$name"
    if $PY -c "import sys; sys.exit(float('$left') < 0.8)"; then
        log=$(mktemp)  # also in $OUT, with an archive every minute: a call killed at its limit still brings them back
        ( while sleep 60; do tar czf "$OUT/.$name.tgz" --exclude=traces -C "$RESULTS" "$name" \
            && mv "$OUT/.$name.tgz" "$OUT/$name.tgz"; done ) &
        $PY -m bench loaders --device cuda --no-progress --resume --out "$RESULTS/$name" --data "$DATA/$data" \
            --model "$model" --batch-size "$batch" --time-limit "$left" "$@" 2>&1 \
            | tee -a "$log" "$OUT/$name.log" || status=$?
        kill $! 2>/dev/null || true
        [ $status = 0 ] && ! grep -q "configurations not started" "$log" && complete=1
        $PY -m bench report "$RESULTS/$name" >/dev/null || true
    fi
    if [ $complete = 1 ]; then  # (on an unfinished grid `choose` could find no loader runs and bench on its own)
        $PY -c "from bench.fastest import choose; print('$name:', choose('$DATA/$data', device='cuda', \
model='$model', batch_size=$batch, compile=$compile, results_dir='$RESULTS/$name'))" \
            | tee "$RESULTS/$name/fastest.txt" || true
    fi
    tar czf "$OUT/$name.tgz" --exclude=traces -C "$RESULTS" "$name"
    if [ $complete = 1 ]; then echo "$name: complete"
    elif [ $status != 0 ]; then echo "$name: bench exited with status $status (failed runs are in its results.md)"
    else echo "$name: NOT complete: run this step again"; fi
}

CIFAR=(--compile --precision bf16)
F1=(--backends torch,hdf5,ffcv,dali,gpu --workers 0,4,8,16 --pin-memory on,off --steps 200 --warmup 20 --repeats 2)
for STEP in "$@"; do
    case $STEP in
        prep) prep ;;
        f1) prep; bench f1 cifar10 ddpm_cifar10 128 "${CIFAR[@]}" "${F1[@]}" ;;
        f1rest) prep  # seeded once per machine: a later call resumes what this machine measured
            [ -d "$RESULTS/f1" ] || { mkdir -p "$RESULTS/f1" && cp bench/results/f1_cifar10_bs128/*.json "$RESULTS/f1/"; }
            bench f1 cifar10 ddpm_cifar10 128 "${CIFAR[@]}" "${F1[@]}" ;;
        f1host) prep; bench f1host cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends torch,hdf5,ffcv,dali,gpu \
                --workers 4 --pin-memory on --steps 200 --warmup 20 --repeats 1 ;;
        f2) prep; bench f2 cifar10 tiny 512 --cpus 4 --backends torch,hdf5,ffcv,dali,gpu --workers 0,3 \
                --pin-memory on --steps 200 --warmup 20 --repeats 2 ;;
        f3) prep; bench f3 fsdd ddpm_audio_mel 128 --cpus 4 --backends torch,hdf5,ffcv,dali,gpu --workers 0,3 \
                --pin-memory on --steps 60 --warmup 10 --repeats 2 ;;
        xcheck) prep
            bench xcheck cifar10 tiny 512 --cpus 4 --backends torch,hdf5,gpu --workers 3 --pin-memory on \
                --steps 40 --warmup 10 --crosscheck
            bench xcheck cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends torch,gpu --workers 0 --pin-memory on \
                --steps 40 --warmup 15 --crosscheck ;;
        gputest) mkdir -p "$OUT" "$RESULTS" ../shared/datasets  # the tests' real data (tests/conftest.py)
            [ -f ../shared/datasets/cifar10-jpg.tar.gz ] || cp "$(datasets)"/*.tar.gz ../shared/datasets/
            if [ -f "$RESULTS/pytest_gpu.txt" ]; then echo "gputest: ran earlier on this machine"; continue; fi
            # a failure is reported and the steps after it still run; a run cut short leaves no pytest_gpu.txt
            $PY -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.txt" || echo "gputest: FAILED"
            cp "$OUT/pytest_gpu.txt" "$RESULTS/" ;;
        *) echo "unknown step $STEP: prep, f1, f1rest, f1host, f2, f3, xcheck or gputest" >&2; exit 2 ;;
    esac
done
