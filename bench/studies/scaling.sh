#!/usr/bin/env bash
# Finding 7 of docs/BENCHMARKS.md: several GPUs of one host (4; a 2-GPU host runs the 1- and 2-GPU parts), in calls of
# at most 9 minutes of wall time. Run the calls back to back on one warm machine: the torch.compile caches and the
# results live in /tmp there, and the later calls resume what the earlier ones measured. On a fresh 4-H200 host every
# new run shape compiled for 2-3 minutes (the first 4-rank run too, with its kernels found in the caches), so a call
# fits about three new shapes; with a carried compile cache (below) they start in under a minute.
#
#   bash bench/studies/scaling.sh call1   # prep; ddpm_cifar10 b128 data-free with the whole step as one CUDA graph
#                                         # (--grad-sync step-graph) at 1/4/2 GPUs, and one GPU's step with
#                                         # reduce-overhead; the step graph's GPU tests (against the step launched op
#                                         # by op on one GPU; against DDP's losses on 2) (~9 min fresh)
#   bash bench/studies/scaling.sh call2   # what call1 left; dit_b2 b256 on synthetic latents (step-graph at 1/4, DDP
#                                         # at 1/4, DDP at 4); the other GPU tests (convert --vae on 2 and 4 GPUs
#                                         # against one, a rank killed under NCCL, the other ways against DDP);
#                                         # profiler traces of 4 ranks (step-graph) and of one GPU's step graph
#   bash bench/studies/scaling.sh call3   # what call2 left; strong scaling at 512; DDP at 1/2/4;
#                                         # the loaders at 4, 2 and all cores per rank; DDP's traces
# On a 2-GPU host the same calls run the 1- and 2-GPU parts. Or any steps by name: prep graph graphtest graphsync weak
# gputest dit traces flattrace loaders cores extras strong nccl summary (extras: ffcv, DALI and stream on every GPU,
# with ffcv and DALI staged as ../shared/device/README.md says and LitData carried: bench/studies/stream_carry.sh).
# Each call first resumes what an earlier one left (a finished grid is skipped in seconds); SCALING_REPEATS=3 adds the
# missing fresh-process repeats of every grid it names.
# A step whose grid did not finish in its call's minutes says "NOT complete": repeat the call (it resumes).
#
# Everything goes to $GPUFEED_RESULTS (default /tmp/gpufeed-scaling): one directory per grid (bench's raw JSON per
# configuration and rank count, results.md/csv, plots), gputest/ (pytest's output and what each test measured),
# traces/ (each run's profile/rankN/trace.json.gz, ops.md), summary.md and summary.json (python -m bench.studies.scaling
# summary). At the end of every call, and every minute while it runs, all of it is archived to ONE file,
# $OUT/scaling.tgz (well under the 16 MiB a returned file may have: traces are 5 steps each and gzipped).
#
# Carry, on every call (a machine that went cold between calls starts over from them): .devdata/cifar10-jpg.tar.gz
# (the CIFAR-10 JPEGs, 20 MB) and .whl/ (the diffusers and importlib_metadata wheels, 6 MB: the convert --vae test and
# the synthetic latents need diffusers); and .devdata/compile.tgz, the last call's compile cache, where there is one.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
R=${GPUFEED_RESULTS:-/tmp/gpufeed-scaling}
D=${GPUFEED_DATA:-/tmp/gpufeed-scaling-data}
MINUTES=${GPUFEED_MINUTES:-8.5}  # of the 10 a command may run: the archive and a run that overran its estimate
STEPS=${SCALING_STEPS:-100}   # measured steps per run: 2 s of ddpm_cifar10 at ~20 ms a step
WARMUP=${SCALING_WARMUP:-30}  # left out: compile, CUDA-graph capture (cudagraph trees record on the 2nd-3rd call)
REPEATS=${SCALING_REPEATS:-1} # fresh processes per configuration; a later call with more resumes the missing ones
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpufeed-inductor}
export GPUFEED_COMPILE_CACHE=${GPUFEED_COMPILE_CACHE:-/tmp/gpufeed-compile}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# the records' commit: HEAD, marked +dirty where the files differ from it (a copy whose history lags its files)
export GPUFEED_COMMIT=${GPUFEED_COMMIT:-$(python3 -c "from common.run_record import git_commit; print(git_commit())" \
  2>/dev/null || echo unknown)}
PY=${PY:-python3}
# the models and sizes of the finding; SCALING_DRY=1 runs the same steps on the CPU in a few minutes (gloo, 2 ranks,
# the tiny presets, a few steps), to try the script where there is no GPU
DEV=cuda COMPILE=--compile M_CIFAR=ddpm_cifar10 B_CIFAR=128 M_DIT=dit_b2 B_DIT=256 GLOBAL=512 CPUS=4 WORKERS=3
LIMIT=(${SCALING_LIMIT:+--limit "$SCALING_LIMIT"}) GPUS=  # SCALING_LIMIT=4096: a quicker prep, for data-free grids
if [ "${SCALING_DRY:-0}" = 1 ]; then
  DEV=cpu COMPILE=--no-compile M_CIFAR=tiny B_CIFAR=8 M_DIT=dit_tiny B_DIT=8 GLOBAL=32 CPUS=1 WORKERS=0 GPUS=2
  STEPS=3 WARMUP=1 LIMIT=(--limit 512)
fi
mkdir -p "$OUT" "$R" "$D"
START=$(date +%s)
GPUS=${GPUS:-$($PY -c "import torch; print(min(4, torch.cuda.device_count()))")}
ALL=$( [ "$GPUS" -ge 4 ] && echo 1,2,4 || echo 1,2 )      # rank counts this host runs
MANY=$( [ "$GPUS" -ge 4 ] && echo 2,4 || echo 2 )
TOP=$( [ "$GPUS" -ge 4 ] && echo 4 || echo 2 )

left() { $PY -c "print(f'{$MINUTES - ($(date +%s) - $START) / 60 - 0.3:.2f}')"; }  # minutes, less the archive's
enough() { $PY -c "import sys; sys.exit(float('$(left)') < ${1:-1.0})"; }
archive() { tar czf "$OUT/.scaling.tgz" -C "$R" . 2>/dev/null && mv "$OUT/.scaling.tgz" "$OUT/scaling.tgz"; }
# A fresh 4-GPU host spends 2-3 minutes compiling each new run shape, so a call fits about three of them. The compile
# cache (training.cache_file: kernels for one torch build and one GPU kind) goes back as $OUT/compile.tgz at the end
# of a call; carried to a later machine as $SCALING_CARRIED_CACHE, its runs start from it.
CARRIED=${SCALING_CARRIED_CACHE:-.devdata/compile.tgz}
if [ -f "$CARRIED" ] && [ -z "$(ls -A "$GPUFEED_COMPILE_CACHE" 2>/dev/null)" ]; then
  mkdir -p -m 700 "$GPUFEED_COMPILE_CACHE" && tar xzf "$CARRIED" -C "$GPUFEED_COMPILE_CACHE" \
    && chmod -R go-rwx "$GPUFEED_COMPILE_CACHE" && echo "compile cache: $(ls "$GPUFEED_COMPILE_CACHE" | wc -l) files from $CARRIED"
fi
keep_cache() {  # at most 15 MiB: one of the 8 files a call brings back, 16 MiB each
  [ -d "$GPUFEED_COMPILE_CACHE" ] || return 0
  [ "$(du -sm "$GPUFEED_COMPILE_CACHE" | cut -f1)" -le 15 ] || { echo "compile cache over 15 MiB: not kept"; return 0; }
  tar czf "$OUT/compile.tgz" -C "$GPUFEED_COMPILE_CACHE" .
}
( while sleep 60; do archive; done ) &
TICKER=$!
trap 'kill $TICKER 2>/dev/null; archive; keep_cache' EXIT

wheels() {  # diffusers for --vae: the wheels carried in .whl (README of the device: pip install --target)
  $PY -c "import diffusers" 2>/dev/null && return
  [ -d .whl ] || { echo "no .whl/: carry the diffusers and importlib_metadata wheels for this step" >&2; return 1; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
}

prep() {  # CIFAR-10 train, 50,000 JPEGs -> files (torch) and hdf5 (the gpu and hdf5 loaders); the host's facts
  [ -f "$D/cifar10/manifest.json" ] || { raw && $PY -m dataprep convert --input "$D/raw/train" --output "$D/cifar10" \
    --format files,hdf5 --quiet "${LIMIT[@]}"; }
  host_facts
}
raw() {  # the JPEGs unpacked, and where the tests look for them
  mkdir -p ../shared/datasets
  [ -f ../shared/datasets/cifar10-jpg.tar.gz ] || cp .devdata/cifar10-jpg.tar.gz ../shared/datasets/
  [ -d "$D/raw" ] || { mkdir -p "$D/raw" && tar xzf .devdata/cifar10-jpg.tar.gz -C "$D/raw"; }
}
host_facts() {  # the host's GPUs, links, versions and cores, once
  mkdir -p "$R/host"
  [ -f "$R/host/versions.txt" ] && return
  nvidia-smi topo -m > "$R/host/topo.txt" 2>&1; nvidia-smi -q > "$R/host/nvidia-smi.txt" 2>&1
  $PY -c "import torch, os; c = torch.cuda.is_available(); print(torch.__version__, torch.version.cuda, \
c and torch.cuda.nccl.version(), c and torch.cuda.get_device_name(0), torch.cuda.device_count(), \
len(os.sched_getaffinity(0)))" > "$R/host/versions.txt"
}

grid() {  # grid NAME DATA ARGS...: one bench loaders grid in $R/NAME, resumed, within the call's minutes
  local name=$1 data=$2 status=0 log
  shift 2
  enough 0.8 || { echo "$name: NOT complete (no minutes left in this call)"; return; }
  log=$(mktemp)
  $PY -m bench loaders --data "$data" --device $DEV $COMPILE --precision bf16 --steps "$STEPS" --timing-warmup "$WARMUP" \
    --repeats "$REPEATS" --resume --no-progress --time-limit "$(left)" --out "$R/$name" "$@" 2>&1 | tee "$log" \
    || status=$?
  cat "$log" >> "$R/$name.log"
  grep -q "not started" "$log" && status=1  # bench: "time limit: N runs not started"
  [ $status = 0 ] && echo "$name: complete" || echo "$name: NOT complete (status $status): repeat this call"
}

CIFAR=(--model $M_CIFAR --batch-size $B_CIFAR --backends none)
graph() {  # the whole step as one CUDA graph: its own 1-GPU rate and the most GPUs first, then one GPU's step with
  # the CUDA graphs of torch.compile (reduce-overhead, the fastest one GPU has had), then the rest
  grid weak-graph "$D/cifar10" "${CIFAR[@]}" --nproc "1,$TOP" --grad-sync step-graph
  grid weak-ddp "$D/cifar10" "${CIFAR[@]}" --nproc 1
  grid weak-graph "$D/cifar10" "${CIFAR[@]}" --nproc "$ALL" --grad-sync step-graph
}
graphtest() {  # the step graph against the step launched op by op on one GPU (eager fp32, compiled bf16)
  grep -q " passed\| failed" "$R/graphtest/pytest.txt" 2>/dev/null && return
  mkdir -p "$R/graphtest"
  timeout 240 $PY -m pytest -m gpu -v -p no:cacheprovider tests/training/test_training_loop.py -k step_graph 2>&1 \
    | tee "$R/graphtest/pytest.txt" | tail -4
}
weak() {  # today's DDP: the 1-GPU rate every way shares, then 2 and 4 ranks
  grid weak-ddp "$D/cifar10" "${CIFAR[@]}" --nproc "$ALL"
}

latents() {  # 2,048 synthetic 32 px images through a tiny autoencoder that does not downsample: 4x32x32 latents,
  [ -f "$D/latents/manifest.json" ] && return  # DiT-B/2's input at 256 px (the SD VAE's), without its encoder's cost
  wheels || return 1
  $PY - "$D/vae" <<'EOF'
import sys
from diffusers import AutoencoderKL
AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",),
              up_block_types=("UpDecoderBlock2D",), block_out_channels=(32,), latent_channels=4, layers_per_block=1,
              norm_num_groups=8, sample_size=32).save_pretrained(sys.argv[1])
EOF
  $PY -m dataprep convert --source synthetic-images --limit 2048 --vae "$D/vae" --format hdf5 --output "$D/latents" \
    --quiet
}
dit() {
  latents || { echo "dit: NOT complete (no latents: diffusers missing)"; return; }
  grid dit-graph "$D/latents" --model $M_DIT --batch-size $B_DIT --backends none --nproc "1,$TOP" \
    --grad-sync step-graph
  grid dit-ddp "$D/latents" --model $M_DIT --batch-size $B_DIT --backends none --nproc "1,$TOP"
}

pytests() {  # pytests NAME -k EXPR: GPU tests of tests/integration/test_ranks_gpu.py into $R/NAME, once
  local name=$1
  shift
  grep -q " passed\| failed" "$R/$name/pytest.txt" 2>/dev/null && { echo "$name: ran in an earlier call"; return; }
  enough 3 || { echo "$name: NOT complete (under 3 minutes left)"; return; }
  wheels || echo "$name: no diffusers: the convert --vae tests skip"
  mkdir -p "$R/$name"
  GPUFEED_TEST_RECORDS="$R/$name" timeout "$($PY -c "print(int(60 * float('$(left)')))")" \
    $PY -m pytest -m gpu -v -s -p no:cacheprovider tests/integration/test_ranks_gpu.py "$@" 2>&1 | tee "$R/$name/pytest.txt"
}
gputest() {  # convert --vae on 2 and 4 GPUs against one; a killed rank under NCCL; every --grad-sync compiled on 2
  # GPUs against DDP's losses (the step graph's first, in a step of its own)
  graphsync
  pytests gputest -k "convert or killed or every_grad"
}
graphsync() { pytests graphsync -k "every_grad and step"; }

profiled() {  # profiled NAME NPROC GRAD_SYNC: `train --profile`, 5 steps after the compile, gpu loader (resident)
  local name=$1 n=$2 sync=$3
  [ -d "$R/traces/$name/profile" ] && return
  enough 1.2 || { echo "traces $name: NOT complete"; return; }
  local run=(-m training --data "$D/cifar10" --loader gpu --model $M_CIFAR --batch-size $B_CIFAR $COMPILE \
    --steps 60 --timing-warmup 45 --profile --sample-every 0 --ckpt-every 0 --log-every 60 --no-progress \
    --grad-sync "$sync" --device $DEV --out "$R/traces/$name")  # --profile: 5 steps, 40-44, after the compile
  mkdir -p "$R/traces"
  if [ "$n" = 1 ]; then $PY "${run[@]}"; else $PY -m torch.distributed.run --standalone --nproc_per_node "$n" "${run[@]}"; fi \
    2>&1 | tail -5 | tee "$R/traces/$name.log"
  rm -f "$R/traces/$name"/ckpt.pt
  $PY -m bench.studies.scaling gzip "$R/traces/$name"
}
traces() {
  profiled ddp-np1 1 ddp
  profiled ddp-np$TOP "$TOP" ddp
}
flattrace() {
  profiled graph-np1 1 step-graph
  profiled graph-np$TOP "$TOP" step-graph
}

loaders() {  # every backend that needs no extra package, 4 cores per rank (3 workers + the training process); its
  # data-free runs, pinned the same way, against weak-ddp's unpinned ones are the per-rank affinity candidate
  grid loaders-cpus$CPUS "$D/cifar10" --model $M_CIFAR --batch-size $B_CIFAR --backends gpu,hdf5,torch \
    --workers $WORKERS --pin-memory on --cpus $CPUS --nproc "$TOP" --grad-sync step-graph
}
cores() {  # the cores per rank each backend needs: 2 (1 worker) and every core of the host shared (4 workers)
  grid loaders-cpus2 "$D/cifar10" --model $M_CIFAR --batch-size $B_CIFAR --backends gpu,hdf5,torch --workers 1 \
    --pin-memory on --cpus 2 --nproc "$TOP"
  grid loaders-shared "$D/cifar10" --model $M_CIFAR --batch-size $B_CIFAR --backends gpu,hdf5,torch --workers 4 \
    --pin-memory on --nproc "$TOP"
}
extras() {  # the loaders that need more than the core install: ffcv, DALI (where installed) and stream, on every GPU
  # at 2 cores a rank (1 worker), then 4 (3 workers), from the same 50,000 JPEGs converted to their formats; the step
  # graph, as `loaders` and train's default on several GPUs
  local dali=
  $PY -c "import nvidia.dali" 2>/dev/null && dali=dali,
  if [ -f .whl/stream/site.tar.xz ]; then  # LitData and boto3, carried (bench/studies/stream_carry.sh)
    [ -d /tmp/streamsite ] || { mkdir -p /tmp/streamsite && tar xJf .whl/stream/site.tar.xz -C /tmp/streamsite; }
    export PYTHONPATH=$PYTHONPATH:/tmp/streamsite
  fi
  [ -f "$D/cifar10-extras/manifest.json" ] || { raw && $PY -m dataprep convert --input "$D/raw/train" \
    --output "$D/cifar10-extras" --format "ffcv,${dali}stream" --quiet "${LIMIT[@]}"; }
  host_facts
  grid extras-cpus2 "$D/cifar10-extras" --model $M_CIFAR --batch-size $B_CIFAR --backends "ffcv,${dali}stream" \
    --workers 1 --pin-memory on --cpus 2 --nproc "$TOP" --grad-sync step-graph
  grid extras-cpus$CPUS "$D/cifar10-extras" --model $M_CIFAR --batch-size $B_CIFAR --backends "ffcv,${dali}stream" \
    --workers $WORKERS --pin-memory on --cpus $CPUS --nproc "$TOP" --grad-sync step-graph
}
nccl() {  # one all-reduce alone, per size, and the transport NCCL chose (NCCL_DEBUG=INFO)
  [ -f "$R/nccl/probe-np$TOP.json" ] && return
  mkdir -p "$R/nccl"
  NCCL_DEBUG=INFO timeout 120 $PY -m torch.distributed.run --standalone --nproc_per_node "$TOP" -m bench.studies.nccl_probe \
    --model $M_CIFAR --out "$R/nccl/probe-np$TOP.json" > "$R/nccl/probe-np$TOP.log" 2>&1
  grep -E "via|NVLS|ms" "$R/nccl/probe-np$TOP.log" | head -20
}
strong() {  # a global batch of 512: 512, 256, 128 per GPU (the last is weak-graph's 4-GPU run, resumed, not rerun)
  grid weak-graph "$D/cifar10" --model $M_CIFAR --backends none --global-batch $GLOBAL --nproc "$ALL" \
    --grad-sync step-graph
}
summary() {
  $PY -m bench.studies.scaling summary "$R" > /dev/null && echo "summary: $R/summary.md"
  $PY -m bench.studies.scaling plot "$R" > /dev/null 2>&1 || echo "plot: none (matplotlib missing?)"
}

[ $# -gt 0 ] || { echo "usage: bash bench/studies/scaling.sh call1|call2|call3|STEP..." >&2; exit 2; }
for STEP in "$@"; do
  case $STEP in
    call1) prep; graph; graphtest; graphsync ;;
    call2) prep; graph; graphtest; graphsync; dit; gputest; flattrace ;;  # (what an earlier call finished is skipped)
    call3) prep; graph; graphtest; graphsync; dit; gputest; flattrace; strong; weak; loaders; cores
           traces; nccl ;;
    prep|graphtest|graphsync|graph|weak|dit|gputest|traces|flattrace|loaders|cores|strong|nccl)
      prep; $STEP ;;
    extras) extras ;;  # its own data alone
    summary) ;;
    *) echo "unknown step $STEP" >&2; exit 2 ;;
  esac
  summary
done
