#!/usr/bin/env bash
# Finding 9 of docs/BENCHMARKS.md on one GPU (study, rate, prep, grid) and on four (convert4): what caching caption
# embeddings buys, and whether every loader keeps a text-conditioned DiT fed from them.
#
#   GPUFEED_COMMIT=<hash> bash bench/studies/text_gpu.sh study   # text_cache: cached vs online, CLIP-L- and T5-XL-sized
#   GPUFEED_COMMIT=<hash> bash bench/studies/text_gpu.sh rate    # the encoders alone vs the conversion's caption writer
#                                                                 # (RATE_ENCODERS="clip" or "t5": one; REPEATS rounds)
#   GPUFEED_COMMIT=<hash> bash bench/studies/text_gpu.sh grid    # prep, every backend on cached latents + text, 2 cores
#                                                                 # (BACKENDS, GRID_WORKERS: fewer, or other counts)
#   GPUFEED_COMMIT=<hash> bash bench/studies/text_gpu.sh grids3  # that data on a SeaweedFS store here, from s3://
#   GPUFEED_COMMIT=<hash> bash bench/studies/text_gpu.sh convert4  # convert --vae / --text-encoder on 1 GPU, then 4
#                                                                 # (CONVERT4_REPEATS=N: the autoencoder's pair N times)
#
# Needs what the GPU image lacks: the text stack (transformers, tokenizers, open_clip's vocabulary, diffusers) as
# .whl/text/site.tar.xz, made here by bench/studies/text_carry.sh; ffcv staged as ../shared/device/README.md says
# (NO_DALI=1: the formats but DALI's; with DALI, the grid has it too), sourced before this script; for grids3, LitData
# and boto3 as .whl/stream/site.tar.xz and the weed binary as .whl/stream/weed.xz (bench/studies/stream_carry.sh).
# Data: .devdata/img/cifar10k.tar.gz, the first 10,000 CIFAR-10 train JPEGs (airplane and automobile), each
# captioned with its own distinct caption (text_cache --caption-folder); CONVERT4_IMAGES: another tarball of that
# layout (all 50,000 CIFAR-10 train JPEGs: ../shared/datasets/cifar10-jpg.tar.gz's train/, with GPUFEED_DATA and
# GPUFEED_RESULTS of their own). Encoders and the autoencoder are built from config (random weights).
# Results: $GPUFEED_RESULTS/<step>/ (default /tmp/gpufeed-text), archived to $OUT/<step>.tgz after each step.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
R=${GPUFEED_RESULTS:-/tmp/gpufeed-text}
D=${GPUFEED_DATA:-/tmp/gpufeed-text-data}
: "${GPUFEED_COMMIT:?set GPUFEED_COMMIT to the commit copied (the copy has no .git)}"
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpufeed-inductor}
[ -d /tmp/textsite ] || { mkdir -p /tmp/textsite && tar xJf .whl/text/site.tar.xz -C /tmp/textsite; }
# their bytecode, as pip install writes it: the GPU machine's Python writes none (-B), so without this every process
# compiled transformers from source (its import took 7-12 s there; on a 2-core host, 2.9 s with bytecode, 7.8 s without)
[ -f /tmp/textsite/.compiled ] || { python3 -m compileall -q -j 0 /tmp/textsite >/dev/null || true; touch /tmp/textsite/.compiled; }
# the stream format's LitData and boto3 (bench/studies/stream_carry.sh), where carried
if [ -f .whl/stream/site.tar.xz ] && [ ! -d /tmp/streamsite ]; then
  mkdir -p /tmp/streamsite && tar xJf .whl/stream/site.tar.xz -C /tmp/streamsite
fi
export PYTHONPATH=$PWD:${PYTHONPATH:+$PYTHONPATH:}/tmp/textsite:/tmp/streamsite
mkdir -p "$OUT" "$R" "$D"
archive() { tar czf "$OUT/$1.tgz" -C "$R" "$1" 2>/dev/null || true; }
trap '[ -n "${step:-}" ] && archive "$step"' EXIT  # a step that failed still brings back what it wrote
needs_litdata() {  # the stream format's writer and reader
  python3 -c "import litdata" 2>/dev/null && return
  echo "$step: the stream format needs LitData: carry .whl/stream/site.tar.xz (bench/studies/stream_carry.sh)" >&2
  exit 2
}
timed() {  # timed FILE CMD...: CMD's wall milliseconds into FILE, its start and end (Unix seconds, a line each)
  # into FILE's .span; as a first run, with no remembered hashes. With the manifest's time of writing and its wall_s,
  # the span splits the time outside the conversion's clock into before it (torchrun) and after it (the exit)
  local t0 t1; t0=$(date +%s%N)
  GPUFEED_HASH_BOOK=$(mktemp -u /tmp/gpufeed-hash-book-XXXXXX.json) "${@:2}"
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 )) >"$1"
  printf '%s\n' "$(( t0 / 1000000 ))" "$(( t1 / 1000000 ))" | awk '{printf "%.3f\n", $1 / 1000}' >"${1%.ms}.span"
}

encoders() {  # encoders KIND:SIZE...: each built once
  local e
  for e in "$@"; do
    [ -d "$D/enc/${e#*:}" ] || python3 -m dataprep make-text-encoder "${e%%:*}" "$D/enc/${e#*:}" --size "${e#*:}"
  done
}

images() {  # the 10,000 captioned JPEGs, the 256 px SD-shaped autoencoder
  [ -f "$D/img/metadata.jsonl" ] && return
  mkdir -p "$D/img" && tar xzf "${CONVERT4_IMAGES:-.devdata/img/cifar10k.tar.gz}" -C "$D/img"
  python3 -m bench.studies.text_cache --caption-folder "$D/img/train"
  [ -d "$D/vaes/sd" ] || python3 -m bench.studies.latent_cache vaes "$D/vaes" >/dev/null
}

store() {  # a SeaweedFS server on 127.0.0.1 with a bucket "data", its AWS_* variables exported
  if [ ! -f /tmp/serve.env ]; then
    mkdir -p /tmp/weedbin && xz -dc .whl/stream/weed.xz > /tmp/weedbin/weed && chmod +x /tmp/weedbin/weed
    GPUFEED_WEED=/tmp/weedbin/weed setsid python3 -m bench.objectstore serve /tmp/weeddata --port 8533 --bucket data \
      > /tmp/serve.log 2>&1 &
    for _ in $(seq 120); do grep -q "is ready" /tmp/serve.log && break; sleep 0.5; done
    grep "^export" /tmp/serve.log > /tmp/serve.env || { cat /tmp/serve.log; exit 1; }
  fi
  source /tmp/serve.env
}

textgrid() {  # textgrid DATA OUT ARGS...: dit_b2_text b256 compiled at 2 cores, each loader against the data-free rate
  # (--resume: the same step run again on the same machine goes on where its time limit stopped it)
  python3 -m bench loaders --resume --data "$1" --model dit_b2_text --compile --precision bf16 --pin-memory on \
    --workers "${GRID_WORKERS:-2}" --cpus 2 --batch-size 256 --steps "${STEPS:-60}" --timing-warmup 15 \
    --repeats "${REPEATS:-3}" --time-limit "${GRID_MINUTES:-6}" --no-progress --out "$2" "${@:3}" 2>&1 | tail -12
}

CONVERT=(python3 -m dataprep convert --input "$D/img/train" --size 256 --quiet --timings --overwrite)
for step in "$@"; do
  echo "== $step"
  mkdir -p "$R/$step"
  (nvidia-smi --query-gpu=name,uuid --format=csv || true) >"$R/$step/nvidia-smi.txt"
  case $step in
    study)
      encoders clip:clip-l t5:t5-xl
      for e in clip=$D/enc/clip-l t5=$D/enc/t5-xl; do
        python3 -m bench.studies.text_cache --device cuda --compile --steps 200 --warmup 50 --encoders "$e" \
          --out "$R/study/text_cache_${e%%=*}.json" 2>&1 | tail -3
        archive study
      done ;;
    rate)  # the files on this machine's disk and in memory (/dev/shm), each beside that place's plain write rate
      kinds=${RATE_ENCODERS:-clip t5}  # or one of them
      [[ " $kinds " != *" clip "* ]] || encoders clip:clip-l
      [[ " $kinds " != *" t5 "* ]] || encoders t5:t5-xl
      specs=$(for k in $kinds; do printf '%s=%s,' "$k" "$D/enc/$([ "$k" = clip ] && echo clip-l || echo t5-xl)"; done)
      python3 -m bench.studies.text_rate --encoders "${specs%,}" --captions "${RATE_N:-12000}" \
        --batch-size 64 --repeats "${REPEATS:-3}" --scratch /tmp,/dev/shm --device cuda \
        --out "$R/rate/encoder_rates.json" ;;
    grid)
      needs_litdata; encoders clip:clip-l; images
      python3 -c "import nvidia.dali" 2>/dev/null && dali=dali, || dali=
      [ -f "$D/tlat/manifest.json" ] || "${CONVERT[@]}" --limit "${IMG_N:-10000}" \
        --format "${dali}hdf5,ffcv,files,stream" --vae "$D/vaes/sd" --text-encoder "$D/enc/clip-l" --batch-size 64 \
        --output "$D/tlat" 2>&1 | tee "$R/grid/convert.txt"
      cp "$D/tlat/manifest.json" "$R/grid/manifest.json"
      textgrid "$D/tlat" "$R/grid/cpus2" --backends "${BACKENDS:-torch,hdf5,ffcv,${dali}gpu,stream}" ;;
    grids3)  # the stream format written to a SeaweedFS store on this machine, read back from s3://
      needs_litdata; encoders clip:clip-l; images; store
      [ -f "$R/grids3/convert.txt" ] || "${CONVERT[@]}" --limit "${IMG_N:-10000}" --format stream --vae "$D/vaes/sd" \
        --text-encoder "$D/enc/clip-l" --batch-size 64 --output s3://data/tlat 2>&1 | tee "$R/grids3/convert.txt"
      textgrid s3://data/tlat "$R/grids3/cpus2" --backends stream ;;
    convert4)  # the whole command's time on one GPU and on all, the autoencoder first, then T5-XL's captions
      images  # (CONVERT4_PARTS="vae t5" by default; either alone)
      n=$(nvidia-smi -L | wc -l)
      python3 -c "import json; from common.run_record import run_record; print(json.dumps(run_record('cuda'), indent=1))" \
        >"$R/convert4/host.json"  # the host, versions and commit the manifests do not record
      run=(--input "$D/img/train" --quiet --timings --overwrite --format hdf5)
      for r in $(seq "${CONVERT4_REPEATS:-1}"); do  # 1 GPU, then all, then again: vae_gpus4, vae_gpus4_r2, ...
        for g in 1 "$n"; do
          [[ " ${CONVERT4_PARTS:-vae t5} " == *" vae "* ]] || break 2
          name=vae_gpus$g$([ "$r" = 1 ] || echo "_r$r")
          timed "$R/convert4/$name.ms" torchrun --standalone --nproc_per_node "$g" -m dataprep convert "${run[@]}" \
            --size 256 --vae "$D/vaes/sd" --batch-size 64 --output "$D/vae$g" >"$R/convert4/$name.txt" 2>&1
          cp "$D/vae$g/manifest.json" "$R/convert4/$name.manifest.json"
          python3 -c "import os, sys; print(f'{os.stat(sys.argv[1]).st_mtime:.3f}')" "$D/vae$g/manifest.json" \
            >>"$R/convert4/$name.span"  # the manifest's time of writing: the conversion's end
          archive convert4
        done
      done
      [[ " ${CONVERT4_PARTS:-vae t5} " != *" t5 "* ]] || encoders t5:t5-xl
      for g in 1 "$n"; do
        [[ " ${CONVERT4_PARTS:-vae t5} " == *" t5 "* ]] || break
        timed "$R/convert4/t5_gpus$g.ms" torchrun --standalone --nproc_per_node "$g" -m dataprep convert "${run[@]}" \
          --text-encoder "$D/enc/t5-xl" --batch-size 64 --output "$D/t5_$g" >"$R/convert4/t5_gpus$g.txt" 2>&1
        cp "$D/t5_$g/manifest.json" "$R/convert4/t5_gpus$g.manifest.json"
        archive convert4
      done ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  archive "$step"
done
echo "text_gpu: done"
