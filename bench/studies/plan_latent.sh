#!/usr/bin/env bash
# Finding 6 of docs/BENCHMARKS.md on one H100 (16 cores): what caching the autoencoder buys. Steps run in the order
# given; grids resume their results directory and stop starting runs when the call's minutes (GPUFEED_MINUTES,
# default 9) are spent, so the same command can be repeated until every grid prints "complete".
#
#   bash bench/studies/plan_latent.sh prep      # CIFAR-10 -> 256 px pixels and SD-VAE latents, the encoder's own rate
#   bash bench/studies/plan_latent.sh cached cached2 cached4   # DiT-B/2 b256 compiled on cached latents, every
#                                                             # backend on all cores, on 2 (--cpus 2) and on 4
#   bash bench/studies/plan_latent.sh online online2 online4   # the same, encoding each batch in the step (--vae)
#   bash bench/studies/plan_latent.sh audio audio2 audio4   # spoken digits made 10.24 s, AudioLDM-shaped VAE,
#                                                    # DiT-B/2 b64, all cores, then 2, then 4 (one grid alone by its
#                                                    # name: audio_online_cpus4, audio_cached, ...); the audio prep also
#                                                    # times the encoding path alone (encode_pace) and, where py-spy
#                                                    # is on the PATH, samples every thread of the conversion
#   bash bench/studies/plan_latent.sh audioprep # the audio prep alone: both conversions, the encoder's rate, encode_pace
#   bash bench/studies/plan_latent.sh gputest   # pytest -m gpu for the latent tests
#
# Data: the first IMG_N (default 10,000) CIFAR-10 train JPEGs, made 256 px by `dataprep convert --size 256`
# (torchvision's Resize(256), bilinear with antialiasing, then CenterCrop(256): 32 px upsampled 8x); the 3,000
# spoken-digit clips zero-padded to 10.24 s (`--clip-seconds 10.24`, 16 kHz mono). Archives from .devdata/img or
# .devdata/aud (or ../shared/datasets). Autoencoders: bench.studies.latent_cache (published shapes, random weights).
# Results: $GPUFEED_RESULTS/<step>/ (default /tmp/gpufeed-latent), archived to $OUT/<step>.tgz after each step.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
R=${GPUFEED_RESULTS:-/tmp/gpufeed-latent}
D=${GPUFEED_DATA:-/tmp/gpufeed-latent-data}
IMG_N=${IMG_N:-10000}
MINUTES=${GPUFEED_MINUTES:-9}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpufeed-inductor} PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# the records' commit: HEAD, marked +dirty where the files differ from it (a copy whose history lags its files)
export GPUFEED_COMMIT=${GPUFEED_COMMIT:-$(python3 -c "from common.run_record import git_commit; print(git_commit())" \
  2>/dev/null || echo unknown)}
mkdir -p "$OUT" "$R" "$D"
START=$(date +%s)
left() { echo $(( MINUTES - ($(date +%s) - START) / 60 )); }
archive() { tar czf "$OUT/$1.tgz" -C "$R" "$1" 2>/dev/null || true; }
archive_of() { for a in .devdata/$1 .devdata ../shared/datasets; do [ -f "$a/$2" ] && { echo "$a/$2"; return; }; done; echo "missing $2" >&2; exit 1; }

grid() {  # grid STEP DATA ARGS...: one bench loaders grid, resumed, inside the call's minutes
  local step=$1 data=$2; shift 2
  local m; m=$(left)
  [ "$m" -ge 1 ] || { echo "$step: no minutes left in this call; repeat the command"; return; }
  python3 -m bench loaders --data "$data" --model dit_b2 --compile --precision bf16 --pin-memory on --resume \
    --time-limit "$m" --no-progress --out "$R/$step" "$@" 2>&1 | tee -a "$R/$step.log" || true
  cp "$R/$step.log" "$R/$step/" 2>/dev/null || true
  archive "$step"
}

images() {
  [ -f "$D/lat256/manifest.json" ] && return
  mkdir -p "$R/prep" "$D/cifar" && tar xzf "$(archive_of img cifar10-jpg.tar.gz)" -C "$D/cifar"
  [ -d "$D/vaes/sd" ] || python3 -m bench.studies.latent_cache vaes "$D/vaes" >"$R/prep/vaes.json"
  "${CONVERT[@]}" --format "$FORMATS" --output "$D/px256" 2>&1 | tee "$R/prep/convert_pixels.txt"
  "${CONVERT[@]}" --format "$FORMATS" --vae "$D/vaes/sd" --batch-size 64 --output "$D/lat256" 2>&1 \
    | tee "$R/prep/convert_latents.txt"
  cp "$D/lat256/manifest.json" "$R/prep/manifest_latents.json"
  # the eager encoder's own rate on this machine, at the conversion's 128 encodings per batch (64 images, mirrored)
  python3 -m bench.studies.latent_cache encoder-rate --vae "$D/vaes/sd" --shape 3,256,256 --batch-size 128 \
    --modes eager --json "$R/prep/encoder_rate_eager.json"
  archive prep
}

audio_data() {
  [ -f "$D/alat/manifest.json" ] && return
  mkdir -p "$R/audio_prep" "$D/fsdd" && tar xzf "$(archive_of aud fsdd-wav.tar.gz)" -C "$D/fsdd"
  [ -d "$D/vaes/audioldm" ] || python3 -m bench.studies.latent_cache vaes "$D/vaes" >/dev/null
  local a=(python3 -m dataprep convert --input "$D/fsdd/recordings" --sample-rate 16000 --clip-seconds 10.24
           --channels 1 --format "$FORMATS" --quiet --timings --overwrite)
  "${a[@]}" --output "$D/awav" 2>&1 | tee "$R/audio_prep/convert_clips.txt"
  "${a[@]}" --vae "$D/vaes/audioldm" --batch-size 32 --output "$D/alat" 2>&1 | tee "$R/audio_prep/convert_latents.txt"
  cp "$D/alat/manifest.json" "$R/audio_prep/manifest_latents.json"
  # at the conversion's own batch: a clip has no mirror, so 32 clips are 32 encodings (an image batch of 64 is 128)
  python3 -m bench.studies.latent_cache encoder-rate --vae "$D/vaes/audioldm" --shape 1,1024,64 --batch-size 32 \
    --modes eager --json "$R/audio_prep/encoder_rate_b32.json"
  # where the conversion's pace goes: its encoding path a step at a time, then the conversion itself sampled by py-spy
  python3 -m bench.studies.encode_pace --vae "$D/vaes/audioldm" --clip-seconds 10.24 --batch-size 32 \
    --json "$R/audio_prep/encode_pace.json" --profile "$R/audio_prep/encode_pace_profile.txt" || true
  if command -v py-spy >/dev/null; then
    py-spy record -s -t -r 50 -f raw -o "$R/audio_prep/convert_latents_pyspy.txt" -- "${a[@]}" --vae "$D/vaes/audioldm" \
      --batch-size 32 --output "$D/alat_spy" 2>&1 | tail -5 || true
  fi
  archive audio_prep
}

FORMATS=${FORMATS:-hdf5,ffcv,files,dali}
BACKENDS=${BACKENDS:-torch,hdf5,ffcv,dali,gpu}
CONVERT=(python3 -m dataprep convert --input "$D/cifar" --size 256 --limit "$IMG_N" --quiet --timings --overwrite)
LAT=(--batch-size 256 --steps 60 --timing-warmup 15)
ONL=(--vae "$D/vaes/sd" --batch-size 256 --steps 40 --timing-warmup 10)
ALAT=(--batch-size 64 --steps 40 --timing-warmup 10)
AONL=(--vae "$D/vaes/audioldm" --batch-size 64 --steps 30 --timing-warmup 8)
grid_step() {  # one audio grid by its name: audio_{cached,online}[_cpus2|_cpus4]
  local kind=${1#audio_} cpus=() workers=8 data=alat args=("${ALAT[@]}")
  case $kind in *_cpus*) workers=${kind##*_cpus}; cpus=(--cpus "$workers"); kind=${kind%_cpus*} ;; esac
  [ "$kind" = online ] && { data=awav; args=("${AONL[@]}"); }
  [ "$kind" = cached ] || [ "$kind" = online ] || { echo "unknown step $1" >&2; exit 2; }
  grid "$1" "$D/$data" --backends "$BACKENDS" --workers "$workers" "${cpus[@]}" "${args[@]}"
}
for step in "$@"; do
  echo "== $step ($(left) min left)"
  case $step in
    prep)
      mkdir -p "$R/prep"; (nvidia-smi || true) >"$R/prep/nvidia-smi.txt"; images
      "${CONVERT[@]}" --format hdf5 --vae "$D/vaes/sd" --batch-size 64 --compile --output "$D/lat256c" 2>&1 \
        | tee "$R/prep/convert_latents_compiled.txt"
      cp "$D/lat256c/manifest.json" "$R/prep/manifest_latents_compiled.json"
      python3 -m bench.studies.latent_cache encoder-rate --vae "$D/vaes/sd" --shape 3,256,256 --batch-size 128 \
        --json "$R/prep/encoder_rate.json"
      archive prep ;;
    cached) images; grid cached "$D/lat256" --backends "$BACKENDS" --workers 8 "${LAT[@]}" ;;
    cached2) images; grid cached_cpus2 "$D/lat256" --backends "$BACKENDS" --workers 2 --cpus 2 "${LAT[@]}" ;;
    cached4) images; grid cached_cpus4 "$D/lat256" --backends "$BACKENDS" --workers 4 --cpus 4 "${LAT[@]}" ;;
    online) images; grid online "$D/px256" --backends "$BACKENDS" --workers 8 "${ONL[@]}" ;;
    online2) images; grid online_cpus2 "$D/px256" --backends "$BACKENDS" --workers 2 --cpus 2 "${ONL[@]}" ;;
    online4) images; grid online_cpus4 "$D/px256" --backends "$BACKENDS" --workers 4 --cpus 4 "${ONL[@]}" ;;
    audio) audio_data; for g in audio_cached audio_online; do grid_step $g; done ;;
    audio2) audio_data; for g in audio_cached_cpus2 audio_online_cpus2; do grid_step $g; done ;;
    audio4) audio_data; for g in audio_cached_cpus4 audio_online_cpus4; do grid_step $g; done ;;
    audioprep) audio_data ;;
    audio_*) audio_data; grid_step "$step" ;;
    gputest)
      mkdir -p "$R/gputest"
      python3 -m pytest -m gpu -q tests/integration/test_latents_gpu.py tests/training/test_dit.py 2>&1 | tee "$R/gputest/pytest_gpu.txt" || true
      archive gputest ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
echo "plan_latent: done ($(left) min left)"
