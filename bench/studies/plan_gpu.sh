#!/usr/bin/env bash
# The GPU findings of docs/BENCHMARKS.md and the starvation cross-check, on one H100 (16 cores), in calls of at most
# 10 minutes each. Steps run in the order given, each resuming its results directory, until the call's minutes
# (GPUFEED_MINUTES, default 9) are spent: repeat the same command until it prints "complete" for every step.
#
#   bash bench/studies/plan_gpu.sh f1          # CIFAR-10, ddpm_cifar10 b128 bf16 compiled (CUDA graphs): the full grid
#   bash bench/studies/plan_gpu.sh f1rest      # f1, resuming the committed bench/results/f1_cifar10_bs128/raw.tar.xz (its missing runs)
#   bash bench/studies/plan_gpu.sh f1host      # f1 at 4 workers, 1 repeat: is the host ahead of the GPU? (host_behind)
#   bash bench/studies/plan_gpu.sh f1w4        # f1's every backend at 4 workers pinned, 3 fresh processes a cell
#   bash bench/studies/plan_gpu.sh f1more      # its other cells: 0 and 8 workers pinned, 4 unpinned (F1_REPEATS, 3)
#   bash bench/studies/plan_gpu.sh f1pin       # torch and hdf5 at 4 workers, pin_memory on and off, on one host
#   bash bench/studies/plan_gpu.sh f2 f3 f3eager  # tiny b512 --cpus 4 compiled; spoken-digit audio, ddpm_audio_mel b128
#                                              # --cpus 4 compiled; the audio model's data-free rate eager, beside it
#   bash bench/studies/plan_gpu.sh conv convsplit  # dataprep convert of the 50,000 real CIFAR-10 JPEGs on all cores
#                                              # and on 2 (FFCV's import and file creation alone first), each format alone
#   bash bench/studies/plan_gpu.sh convspy     # the same conversion under py-spy, every process sampled
#   bash bench/studies/plan_gpu.sh soak        # start the 20-minute run of docs/RELIABILITY.md detached, and return
#   bash bench/studies/plan_gpu.sh soakwait    # wait for it within this call's minutes; repeat until "soak: complete"
#   bash bench/studies/plan_gpu.sh fastest     # the GPU test: `fastest` decides in a minute for ddpm_cifar10 compiled
#   bash bench/studies/plan_gpu.sh xcheck      # profiler trace vs CUDA events, starved and fed runs
#   bash bench/studies/plan_gpu.sh gputest     # the CUDA cases of the test suite (pytest -m gpu), with the real data;
#                                              # ~20 min on a fresh machine: in parts, GPUTEST_FILES="tests/a.py ..."
#   bash bench/studies/plan_gpu.sh curve       # the training loop's loss curve with the UNet's faster forms and previous ones
#   bash bench/studies/plan_gpu.sh gap         # finding 2's pick (gpu) against its data-free rate: 3 alternated repeats,
#                                              # then one profiled run each (GPU busy time and kernels per step)
#   bash bench/studies/plan_gpu.sh coldstart   # launch to first step of compiled ddpm_cifar10: empty caches, then the
#                                              # compile cache the cold run saved (COLD_ROUNDS pairs, default 1)
#   bash bench/studies/plan_gpu.sh scale       # weak scaling: 1, 2, 4, 8 GPUs (as many as present), b128 per GPU
#   bash bench/studies/plan_gpu.sh strong      # strong scaling: the same at a global batch of 512
#
# Grids, 2 repeats each (median and range; every repeat measures its own data-free rate):
# - f1: every backend x workers 0,4,8,16 x pin_memory on/off: 24 loader configurations + data-free = 52 runs,
#   200 measured steps after 20 warm-up. Measured: 35-45 s each with a warm compile cache (~20 s of it loading the
#   compiled graphs and capturing CUDA graphs), 160 s for the first on a fresh machine: ~36 min, 4-5 calls.
# - f2: tiny b512 on 4 cores, compiled with CUDA graphs (eager tiny is launch-bound on the host: its repeats differed
#   by up to +-13%, see docs/BENCHMARKS.md), every backend present, 3 workers (+ the training process: the 4 cores),
#   600 measured steps. f3: audio, ddpm_audio_mel b128 on 4 cores, compiled, the same backends, 120 measured steps.
#   f3eager: the audio model eager, its data-free rate against the compiled one of f3, on the same machine.
# - scale (a host of 2-8 GPUs): ddpm_cifar10 b128 per GPU, bf16, compiled, --nproc 1,2,4,8 (those the host has), the
#   fastest backend of f1 (gpu; SCALE_BACKENDS to change) and the torch baseline, 4 workers pinned, at --cpus 2 and 4
#   per rank and all cores shared (SCALE_CPUS="2 4 all" to change), 200 measured steps, 2 repeats. Not yet run: at
#   ~40 s a run (f1's, plus ~10 s of torchrun's start) 4 rank counts x 3 core budgets x (2 loaders + data-free) x 2
#   repeats = 72 runs, ~50 min, 6 calls on 8 GPUs; a --cpus budget the host cannot give every rank (8 x 4 > cores) is left out, not failed.
# - strong: the same loaders at --cpus 4 and all cores, a global batch of 512 (512, 256, 128, 64 per GPU): 48 runs,
#   ~32 min. The goal: 8 GPUs >= 7.3x one (weak), and where a smaller per-GPU batch stops the scaling (strong).
#   DALI is in the grids only where it is installed (the machine may carry only the smaller extras).
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
[ $# -gt 0 ] || { echo "usage: bash bench/studies/plan_gpu.sh STEP... (prep f1 f1rest f1w4 f1more f1pin f1host f2 f3 f3eager conv convsplit convspy soak soakwait fastest xcheck gputest curve gap coldstart scale strong)" >&2; exit 2; }
OUT=${OUT:-$PWD/gpu-out}  # logs and archives of each step
RESULTS=${GPUFEED_RESULTS:-/tmp/gpufeed-results}
DATA=${GPUFEED_DATA:-/tmp/gpufeed-data}
MINUTES=${GPUFEED_MINUTES:-9}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpufeed-inductor}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# the records' commit: HEAD, marked +dirty where the files differ from it (a copy whose history lags its files)
export GPUFEED_COMMIT=${GPUFEED_COMMIT:-$(python3 -c "from common.run_record import git_commit; print(git_commit())" \
  2>/dev/null || echo unknown)}
PY=${PY:-python}

datasets() {
    for d in ../shared/datasets shared/datasets .devdata /work/shared/datasets; do
        [ -f "$d/cifar10-jpg.tar.gz" ] && { echo "$d"; return; }
    done
    echo "no cifar10-jpg.tar.gz in ../shared/datasets, shared/datasets, .devdata or /work/shared/datasets" >&2
    exit 1
}

prep() {  # ~1 min on 16 cores: real CIFAR-10 train (50,000), every format; with `audio`, FSDD's 3,000 clips too
    local src
    src=$(datasets)
    mkdir -p "$DATA"
    if [ ! -f "$DATA/cifar10/manifest.json" ]; then
        [ -d "$DATA/raw/cifar" ] || { mkdir -p "$DATA/raw/cifar" && tar xzf "$src/cifar10-jpg.tar.gz" -C "$DATA/raw/cifar"; }
        $PY -m dataprep convert --input "$DATA/raw/cifar" --output "$DATA/cifar10" --format all --quiet
    fi
    if [ "${1:-}" = audio ] && [ ! -f "$DATA/fsdd/manifest.json" ]; then
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
        local size=(--batch-size "$batch")
        [[ " $* " != *" --global-batch "* ]] || size=()  # strong scaling: the batch per GPU follows the rank count
        $PY -m bench loaders --device cuda --no-progress --resume --out "$RESULTS/$name" --data "$DATA/$data" \
            --model "$model" "${size[@]}" --time-limit "$left" "$@" 2>&1 \
            | tee -a "$log" "$OUT/$name.log" || status=$?
        kill $! 2>/dev/null || true
        [ $status = 0 ] && ! grep -q "not started" "$log" && complete=1
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

# the backends this machine can run: DALI only where it is installed
BACKENDS=torch,hdf5,ffcv,gpu
$PY -c "import nvidia.dali" 2>/dev/null && BACKENDS=torch,hdf5,ffcv,dali,gpu
BACKENDS=${GPUFEED_BACKENDS:-$BACKENDS}  # or fewer, where a call has minutes for fewer

conv_input() {
    local src
    src=$(datasets)
    [ -d "$DATA/raw/cifar" ] || { mkdir -p "$DATA/raw/cifar" && tar xzf "$src/cifar10-jpg.tar.gz" -C "$DATA/raw/cifar"; }
    mkdir -p "$RESULTS/conv" "$OUT"
}

conv() {  # 50,000 real CIFAR-10 train JPEGs: FFCV's import and file creation alone, then every format on all cores
    conv_input  # (twice) and on 2, then each format alone on all cores: the stages each run timed are in the JSON
    $PY -m bench.studies.conversion_speed --machine --input "$DATA/raw/cifar" --scratch "$(mktemp -d -p "$DATA")" \
        --cores all,2 --repeats 2 --out "$RESULTS/conv/conversion_speed.json" | tee "$OUT/conv.log"
    cp "$RESULTS/conv/conversion_speed.json" "$OUT/"
}

convsplit() {  # where the time goes on all cores: each format alone
    conv_input
    $PY -m bench.studies.conversion_speed --input "$DATA/raw/cifar" --scratch "$(mktemp -d -p "$DATA")" --cores all \
        --formats "files;hdf5;ffcv;dali" --out "$RESULTS/conv/conversion_split.json" | tee "$OUT/convsplit.log"
    cp "$RESULTS/conv/conversion_split.json" "$OUT/"
}

convspy() {  # one conversion of every format on all cores under py-spy (wheel in .devtools), every process sampled
    conv_input
    $PY -m pip install -q --no-index --no-deps --target /tmp/pyspy .devtools/py_spy-*.whl
    rm -rf "$DATA/conv-scratch"
    /tmp/pyspy/bin/py-spy record -s -t -r 50 -f raw -o "$OUT/conv-pyspy.txt" -- $PY -m dataprep convert \
        --input "$DATA/raw/cifar" --output "$DATA/conv-scratch" --quiet --timings 2>&1 | tee "$OUT/convspy.log"
    gzip -f "$OUT/conv-pyspy.txt"
}

SOAK=$RESULTS/soak
soak_start() {  # the 20-minute run of docs/RELIABILITY.md, detached: it outlives this call
    [ ! -f "$SOAK/pid" ] || { echo "soak: started earlier (pid $(cat "$SOAK/pid"))"; return; }
    mkdir -p "$SOAK/bench"  # `fastest` picks from finding 1's H100 results, of the backends installed here
    for f in $(tar -tJf bench/results/f1_cifar10_bs128/raw.tar.xz --wildcards '*.json'); do
        if [[ ",$BACKENDS," == *",$(cut -d- -f1 <<< "$f"),"* || $f == datafree-* ]]; then
            tar -xJf bench/results/f1_cifar10_bs128/raw.tar.xz -C "$SOAK/bench/" "$f"
        fi
    done
    GPUFEED_BENCH_RESULTS=$SOAK/bench setsid nohup $PY -m bench soak --out "$SOAK/soak" --interval 5 --duration 1200 \
        --warmup 180 -- $PY -m training --data "$DATA/cifar10" --loader fastest --model ddpm_cifar10 --batch-size 128 \
        --steps 100000000 --precision bf16 --compile --sample-every 0 --ckpt-every 20000 --log-every 1000 \
        --no-progress --out "$SOAK/run" > "$SOAK/soak.log" 2>&1 < /dev/null &
    echo $! > "$SOAK/pid"
    echo "soak: started (pid $!)"
}

soak_wait() {  # until the soak ends or this call's minutes are spent, archiving it every minute
    local n=0
    while kill -0 "$(cat "$SOAK/pid")" 2>/dev/null && $PY -c "import sys; sys.exit(float('$(minutes_left)') < 0.1)"; do
        sleep 10
        n=$((n + 1))
        [ $((n % 6)) != 0 ] || tar czf "$OUT/soak.tgz" --exclude=run -C "$RESULTS" soak
    done
    tar czf "$OUT/soak.tgz" --exclude='*.pt' -C "$RESULTS" soak
    tail -3 "$SOAK/soak.log"
    if [ -f "$SOAK/soak/resources-summary.json" ]; then echo "soak: complete"; else echo "soak: still running"; fi
}

CIFAR=(--compile --precision bf16)
GPUS=$($PY -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
CORES=$($PY -c "import os; print(len(os.sched_getaffinity(0)))")
ranks() {  # the rank counts of 1,2,4,8 this host has GPUs for, and (given C) cores for at C per rank
    local n out="" per=${1:-0}
    for n in 1 2 4 8; do
        [ "$n" -le "$GPUS" ] && [ $((n * per)) -le "$CORES" ] && out+="${out:+,}$n"
    done
    echo "$out"
}
# scaling STEP "CPUS..." ARGS...: one grid per core budget (cores per rank, or all shared), each its own directory
scaling() {
    local name=$1 budgets=$2 cpus n
    shift 2
    for cpus in $budgets; do
        n=$(ranks "$([ $cpus = all ] && echo 0 || echo $cpus)")
        [ -n "$n" ] || { echo "$name: no GPUs for --cpus $cpus"; continue; }
        bench "$name-cpus$cpus" cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends "${SCALE_BACKENDS:-gpu,torch}" \
            --workers 4 --pin-memory on --steps 200 --timing-warmup 20 --repeats 2 --nproc "$n" \
            $([ $cpus = all ] || echo --cpus $cpus) "$@"
    done
}
F1=(--backends torch,hdf5,ffcv,dali,gpu --workers 0,4,8,16 --pin-memory on,off --steps 200 --timing-warmup 20 --repeats 2)
for STEP in "$@"; do
    case $STEP in
        prep) prep audio ;;
        f1) prep; bench f1 cifar10 ddpm_cifar10 128 "${CIFAR[@]}" "${F1[@]}" ;;
        f1rest) prep  # seeded once per machine: a later call resumes what this machine measured
            [ -d "$RESULTS/f1" ] || { mkdir -p "$RESULTS/f1" && tar -xJf bench/results/f1_cifar10_bs128/raw.tar.xz -C "$RESULTS/f1/" --wildcards '*.json'; }
            bench f1 cifar10 ddpm_cifar10 128 "${CIFAR[@]}" "${F1[@]}" ;;
        f1w4) prep; bench f1w4 cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends "$BACKENDS" --workers 4 \
                --pin-memory on --steps 200 --timing-warmup 20 --repeats 3 ;;
        f1more) prep  # f1w4's other cells: 0 and 8 workers pinned, then 4 workers unpinned (one data-free set)
            bench f1more cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends "${BACKENDS/,gpu/}" --workers 0,8 \
                --pin-memory on --steps 200 --timing-warmup 20 --repeats "${F1_REPEATS:-3}"
            bench f1more cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends torch,hdf5 --workers 4 --pin-memory off \
                --steps 200 --timing-warmup 20 --repeats "${F1_REPEATS:-3}" ;;
        f1pin) prep  # f1w4 and f1more each had one half: pin on against off, from one machine and one data-free set
            bench f1pin cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends torch,hdf5 --workers 4 --pin-memory on,off \
                --steps 200 --timing-warmup 20 --repeats "${F1_REPEATS:-3}" ;;
        f1host) prep; bench f1host cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends torch,hdf5,ffcv,dali,gpu \
                --workers 4 --pin-memory on --steps 200 --timing-warmup 20 --repeats 1 ;;
        f2) prep; bench f2 cifar10 tiny 512 --compile --cpus 4 --backends $BACKENDS --workers 3 \
                --pin-memory on --steps 600 --timing-warmup 30 --repeats 2 ;;
        f3) prep audio; bench f3 fsdd ddpm_audio_mel 128 --compile --cpus 4 --backends $BACKENDS --workers 3 \
                --pin-memory on --steps 120 --timing-warmup 20 --repeats 2 ;;
        f3eager) prep audio; bench f3eager fsdd ddpm_audio_mel 128 --cpus 4 --backends gpu --steps 60 --timing-warmup 10 \
                --repeats 2 ;;
        conv) conv ;;
        convsplit) convsplit ;;
        convspy) convspy ;;
        soak) prep; soak_start ;;
        soakwait) soak_wait ;;
        fastest) mkdir -p "$OUT"
            $PY -m pytest -m gpu -q -s -p no:cacheprovider tests/bench/test_bench_fastest.py -k decides_within_a_minute 2>&1 \
                | tee "$OUT/pytest_fastest.txt" || echo "fastest: FAILED" ;;
        xcheck) prep
            bench xcheck cifar10 tiny 512 --cpus 4 --backends torch,hdf5,gpu --workers 3 --pin-memory on \
                --steps 40 --timing-warmup 10 --crosscheck
            bench xcheck cifar10 ddpm_cifar10 128 "${CIFAR[@]}" --backends torch,gpu --workers 0 --pin-memory on \
                --steps 40 --timing-warmup 15 --crosscheck ;;
        gputest) mkdir -p "$OUT" "$RESULTS" ../shared/datasets  # the tests' real data (tests/conftest.py)
            [ -f ../shared/datasets/cifar10-jpg.tar.gz ] || cp "$(datasets)"/*.tar.gz ../shared/datasets/
            if [ -z "${GPUTEST_FILES:-}" ] && [ -f "$RESULTS/pytest_gpu.txt" ]; then
                echo "gputest: ran earlier on this machine"; continue
            fi
            # a failure is reported and the steps after it still run; a run cut short leaves no pytest_gpu.txt
            $PY -m pytest -m gpu -v --durations=15 -p no:cacheprovider ${GPUTEST_FILES:-} 2>&1 | tee "$OUT/pytest_gpu.txt" || echo "gputest: FAILED"
            cp "$OUT/pytest_gpu.txt" "$RESULTS/" ;;
        curve) prep; mkdir -p "$OUT"  # ~7 min on a fresh machine (two cold compiles)
            $PY -m bench.studies.forms_loss_curve --data "$DATA/cifar10" --steps 4000 --out "$RESULTS/curve" 2>&1 \
                | tee "$OUT/curve.log" || echo "curve: FAILED"
            tar czf "$OUT/curve.tgz" -C "$RESULTS" curve ;;
        gap) prep; mkdir -p "$OUT"  # ~5 min on a fresh machine
            $PY -m bench.studies.datafree_gap --data "$DATA/cifar10" --backend gpu --model tiny --batch-size 512 \
                --cpus 4 --compile --steps 600 --warmup 30 --repeats 3 --out "$RESULTS/gap" 2>&1 | tee "$OUT/gap.log" \
                || echo "gap: FAILED"
            tar czf "$OUT/gap.tgz" --exclude=traces -C "$RESULTS" gap ;;
        coldstart) prep; mkdir -p "$OUT"  # ~5 min a round: a cold compile, then one from the compile cache
            $PY -m bench.studies.cold_start --data "$DATA/cifar10" --model ddpm_cifar10 --device cuda --precision bf16 \
                --batch-size 128 --steps 400 --warmup 100 --rounds "${COLD_ROUNDS:-1}" --out "$RESULTS/coldstart" 2>&1 \
                | tee "$OUT/coldstart.log" || echo "coldstart: FAILED"
            tar czf "$OUT/coldstart.tgz" -C "$RESULTS" coldstart ;;
        scale) prep; scaling scale "${SCALE_CPUS:-2 4 all}" ;;
        strong) prep; scaling strong "${SCALE_CPUS:-4 all}" --global-batch 512 ;;
        *) echo "unknown step $STEP: prep, f1, f1rest, f1w4, f1more, f1pin, f1host, f2, f3, f3eager, conv, convsplit, convspy, soak, soakwait, fastest, xcheck, gputest, curve, gap, coldstart, scale or strong" >&2; exit 2 ;;
    esac
done
