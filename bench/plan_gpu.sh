#!/usr/bin/env bash
# Issue 5's GPU findings 1-3 and the starvation cross-check, sized for one H100 with 16 cores and about 25 minutes of
# device time: each step below is one device command under 10 minutes, and each begins by preparing the data when it
# is missing (a fresh machine has none), so the steps can run on different machines and in any order.
#
#   bash bench/plan_gpu.sh f1        # CIFAR-10, ddpm_cifar10 b128 bf16 compiled: torch at workers 0,4,16    7.7 min*
#   bash bench/plan_gpu.sh f1b       # ... every backend at 4 workers: gpu, ffcv (then f1c on the same machine) 7.6 min
#   bash bench/plan_gpu.sh f1c       # ... dali; pin on/off for torch and hdf5; what `fastest` picks         6.5 min
#   bash bench/plan_gpu.sh f2        # tiny b512, --cpus 4: where torch starves and what fixes it                ~6 min
#   bash bench/plan_gpu.sh xcheck    # profiler trace vs CUDA events, starved and fed runs (tiny and cifar)   6.3 min*
#   bash bench/plan_gpu.sh f3        # FSDD audio, ddpm_audio_mel b128, --cpus 4                                  ~6 min
# (* measured on the H100 machine, prep excluded; prep takes ~1.3 min for both datasets on 16 cores. A compiled grid's
# first run on a fresh machine compiles cold, ~3 min; the rest load the cache and take ~40 s each with CUDA graphs.)
# In that order of priority; f1c, f2 and f3 end with what `train --loader fastest` picks from their results. Each
# grid prints its estimate first (they ran ~1.5x over it). A step that ran out of time can be rerun:
# --resume skips the runs already in its results directory (same machine only).
#
# The reduction, and why each finding is still answered:
# - f1: the issue asks every backend x workers 0,4,8,16 x pin_memory (40 configurations; ~20 s each compiled, x2
#   repeats: ~27 min). At ~5,000 img/s (ddpm_cifar10 compiled with CUDA graphs) only the torch baseline can
#   starve: it delivers ~6,000 img/s at 4 workers with no model, every other backend 35x more (docs/BENCHMARKS.md). So torch gets workers 0,4,16,
#   pin_memory on/off is measured where it applies (torch, hdf5) at 4 workers, and ffcv, dali, gpu one point each at 4
#   workers (a 16-core node's share per GPU with DDP on 4 GPUs). 20 runs, data-free included.
# - f2/f3: 4 cores per run; workers 0 and 3 (3 workers + the training process fill the 4 cores).
# - Steps: 60 measured after 15 warm-up (f3: 30 after 8): starvation is summed gaps over the span, and tens of
#   steps resolve a 1% share at these step times; 2 repeats everywhere, for the range in the report.
# - torch.compile is paid once per machine: runs share TORCHINDUCTOR_CACHE_DIR (FX graph + AOT autograd caches).
# Results: /tmp/gpufeed-results/<step>/ on the machine (kept while it stays warm, so f1c resumes f1b's directory and
# its data-free runs), archived to $OUT/<step>.tgz after every grid: one JSON per run, results.csv, results.md,
# plot-*.png, grid.log (xcheck's traces/ stay on the machine: tens of MB). f1 and f1b each measure their own
# data-free rate: every ratio compares runs of one machine.
set -euo pipefail
cd "$(dirname "$0")/.."
STEP=${1:?usage: bash bench/plan_gpu.sh prep|f1|f1b|f1c|f2|f3|xcheck}
OUT=${OUT:-$PWD/gpu-out}  # the device tool sets OUT to the folder it brings back
RESULTS=${GPUFEED_RESULTS:-/tmp/gpufeed-results}
DATA=${GPUFEED_DATA:-/tmp/gpufeed-data}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpufeed-inductor}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export GPUFEED_COMMIT=${GPUFEED_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
PY=${PY:-python}

datasets() {
    for d in ../shared/datasets shared/datasets /work/shared/datasets; do
        [ -f "$d/cifar10-jpg.tar.gz" ] && { echo "$d"; return; }
    done
    echo "no cifar10-jpg.tar.gz in ../shared/datasets, shared/datasets or /work/shared/datasets" >&2
    exit 1
}

prep() {  # ~1 min on 16 cores: real CIFAR-10 train (50,000) and FSDD (3,000 clips), every format
    local src
    src=$(datasets)
    mkdir -p "$DATA"
    if [ ! -f "$DATA/cifar10/manifest.json" ]; then
        [ -d "$DATA/raw/cifar" ] || { mkdir -p "$DATA/raw/cifar" && tar xzf "$src/cifar10-jpg.tar.gz" -C "$DATA/raw/cifar"; }
        $PY -m dataprep convert --input "$DATA/raw/cifar" --output "$DATA/cifar10" --format all --quiet \
            ${LIMIT:+--limit $LIMIT}
    fi
    if [ ! -f "$DATA/fsdd/manifest.json" ]; then
        [ -d "$DATA/raw/fsdd" ] || { mkdir -p "$DATA/raw/fsdd" && tar xzf "$src/fsdd-wav.tar.gz" -C "$DATA/raw/fsdd"; }
        $PY -m dataprep convert --input "$DATA/raw/fsdd/recordings" --output "$DATA/fsdd" --format all \
            --sample-rate 16000 --clip-seconds 1.024 --channels 1 --quiet ${LIMIT:+--limit $LIMIT}
    fi
}

bench() {  # bench STEP_DIR ARGS...: run a grid into $RESULTS/STEP_DIR, report it, archive it to $OUT/STEP_DIR.tgz
    local name=$1 status=0
    shift
    $PY -m bench loaders --device cuda --no-progress --resume --out "$RESULTS/$name" "$@" || status=$?
    $PY -m bench report "$RESULTS/$name" || true
    # one archive per step: the device tool brings back at most 8 files of 16 MiB (xcheck's traces stay behind)
    mkdir -p "$OUT" && tar czf "$OUT/$name.tgz" --exclude=traces -C "$RESULTS" "$name"
    [ $status = 0 ] || echo "bench $name: exit $status (failed runs are listed in its results.md)" >&2
}

fastest() {  # fastest STEP_DIR DATA MODEL BATCH: what `train --loader fastest` picks from those results
    [ -d "$RESULTS/$1" ] || { echo "no $RESULTS/$1 on this machine: run its step first" >&2; return; }
    $PY -c "import sys; from bench.fastest import choose; c = choose('$DATA/$2', device='cuda', model='$3', \
batch_size=$4, results_dir='$RESULTS/$1'); print('$1:', c)" | tee "$RESULTS/$1/fastest.txt"
    tar czf "$OUT/$1.tgz" --exclude=traces -C "$RESULTS" "$1"
}

CIFAR=(--data "$DATA/cifar10" --batch-size 128 --model ddpm_cifar10 --compile --precision bf16)
case $STEP in
    prep) prep ;;
    f1) prep; bench f1 "${CIFAR[@]}" --backends torch --workers 0,4,16 --pin-memory on --steps 60 --warmup 15 \
            --repeats 2 ;;
    f1b) prep; bench f1b "${CIFAR[@]}" --backends gpu,ffcv --workers 4 --steps 60 --warmup 15 --repeats 2 ;;
    f1c) prep  # same directory as f1b: its data-free runs are reused
        bench f1b "${CIFAR[@]}" --backends dali,hdf5,torch --workers 4 --pin-memory on,off --steps 60 --warmup 15 \
            --repeats 2
        fastest f1b cifar10 ddpm_cifar10 128 ;;
    f2) prep; bench f2 --data "$DATA/cifar10" --batch-size 512 --model tiny --cpus 4 \
            --backends torch,hdf5,ffcv,dali,gpu --workers 0,3 --pin-memory on --steps 200 --warmup 15 --repeats 2
        fastest f2 cifar10 tiny 512 ;;
    f3) prep; bench f3 --data "$DATA/fsdd" --batch-size 128 --model ddpm_audio_mel --cpus 4 \
            --backends torch,hdf5,ffcv,dali,gpu --workers 0,3 --pin-memory on --steps 30 --warmup 8 --repeats 2
        fastest f3 fsdd ddpm_audio_mel 128 ;;
    xcheck) prep
        bench xcheck --data "$DATA/cifar10" --batch-size 512 --model tiny --cpus 4 --backends torch,hdf5,gpu \
            --workers 3 --pin-memory on --steps 40 --warmup 10 --crosscheck
        bench xcheck "${CIFAR[@]}" --backends torch,gpu --workers 0 --pin-memory on --steps 40 --warmup 15 \
            --crosscheck ;;
    *) echo "unknown step $STEP: prep, f1, f1b, f1c, f2, f3 or xcheck" >&2; exit 2 ;;
esac
