#!/usr/bin/env bash
# The stream loader's pace on the GPU machine, the loader alone (bench.studies.stream_pace), in one command. Carry
# .whl/stream (bench/studies/stream_carry.sh) and .devdata/ holding cifar10-train.tar.gz (the train/ folder of
# ../shared/datasets/cifar10-jpg.tar.gz) and a py-spy wheel (optional: one profiled cell), then
#   GPUFEED_COMMIT=<hash> bash bench/studies/stream_pace.sh [CELLS]
# CELLS: lines "URL WORKERS [THREADS]" on stdin-like form in $PACE_CELLS (default below). Raw JSON and logs go to
# $OUT/stream_pace.tar.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/site /tmp/weedbin "$OUT" /tmp/pace
[ -x /tmp/weedbin/weed ] || { tar -C /tmp/site -xJf .whl/stream/site.tar.xz && xz -dc .whl/stream/weed.xz > /tmp/weedbin/weed \
  && chmod +x /tmp/weedbin/weed; } || exit 1
ls .devdata/py_spy-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-deps --target /tmp/pyspy .devdata/py_spy-*.whl
export PYTHONPATH=/tmp/site:$PWD GPUFEED_WEED=/tmp/weedbin/weed PYTHONUNBUFFERED=1
nproc; python3 -c 'import torch, litdata; print(torch.__version__, torch.cuda.get_device_name(), litdata.__version__)'
[ -d /tmp/cifar/train ] || { mkdir -p /tmp/cifar && tar -C /tmp/cifar -xzf .devdata/cifar10-train.tar.gz; } || exit 1
if [ ! -f /tmp/serve.env ]; then
  setsid python3 -m bench.objectstore serve /tmp/weeddata --port 8533 --bucket data > /tmp/serve.log 2>&1 &
  for _ in $(seq 120); do grep -q "is ready" /tmp/serve.log && break; sleep 0.5; done
  grep "^export" /tmp/serve.log > /tmp/serve.env || { cat /tmp/serve.log; exit 1; }
fi
source /tmp/serve.env
for spec in ${PACE_PREPARE:-c16:16 c2:2}; do
  name=${spec%%:*}; mib=${spec#"$name"}; mib=${mib#:}
  [ -f /tmp/pace/prepared-$name ] || { python3 -m bench.studies.stream_pace prepare --input /tmp/cifar/train \
    --url s3://data/$name ${mib:+--shard-mib $mib} && touch /tmp/pace/prepared-$name; } || exit 1
done
cells=${PACE_CELLS-"c16 0;c16 1;c16 2;c16 4;c16 8;c16 4 1;c16 8 1;c2 4;c2 8;c2 16"}
IFS=';' read -ra list <<< "$cells"
for c in "${list[@]}"; do
  read -r name w t <<< "$c"; [ -n "$name" ] || continue
  tag="${name}_w${w}${t:+_t$t}"
  timeout ${PACE_CELL_S:-120} python3 -m bench.studies.stream_pace cell --url s3://data/$name --workers "$w" \
    ${t:+--threads $t} --out "/tmp/pace/$tag.json" 2>&1 | tail -n 4
done
if [ -x /tmp/pyspy/bin/py-spy ] && [ -n "${PACE_PROFILE-c16 4}" ]; then
  read -r name w <<< "${PACE_PROFILE-c16 4}"
  timeout 120 /tmp/pyspy/bin/py-spy record --subprocesses -r 50 -f raw -o /tmp/pace/profile_${name}_w$w.txt -- \
    python3 -m bench.studies.stream_pace cell --url s3://data/$name --workers "$w" --epochs 1 \
    --out /tmp/pace/profiled_${name}_w$w.json 2>&1 | tail -n 3
fi
# PACE_LATENTS=N: N synthetic latents of DiT-B/2 at 256 px, hdf5 at /tmp/lat (DATA "lat" for the gpu loader) and
# stream at s3://data/lat (DATA "s3lat")
if [ -n "${PACE_LATENTS:-}" ] && [ ! -f /tmp/pace/prepared-lat ]; then
  rm -rf /tmp/lat && python3 -m bench.studies.stream_pace latents --url s3://data/lat --local /tmp/lat \
    --count "$PACE_LATENTS" && touch /tmp/pace/prepared-lat || exit 1
fi
# PACE_LINK=RATE: the train runs read the store through a shaped link of RATE bytes/s (bench.objectstore.throttle),
# whose carried bytes each run records
if [ -n "${PACE_LINK:-}" ]; then
  pkill -f "stream_pace link" ; rm -f /tmp/pace/link.json
  setsid python3 -m bench.studies.stream_pace link --target-port 8533 --rate "$PACE_LINK" \
    --state /tmp/pace/link.json > /tmp/link.log 2>&1 &
  for _ in $(seq 60); do [ -f /tmp/pace/link.json ] && break; sleep 0.5; done
  export AWS_ENDPOINT_URL=http://127.0.0.1:$(python3 -c 'import json;print(json.load(open("/tmp/pace/link.json"))["port"])')
fi
# PACE_TRAIN: runs "TAG DATA LOADER [OPTIONS]" separated by ';' of `train` (ddpm_cifar10 b128 compiled unless the
# options name another --model), each run's summary.json, metrics.jsonl and link bytes kept; DATA may be h5 (the
# local hdf5 copy of CIFAR-10), lat or s3lat (PACE_LATENTS), or s3://data/NAME. PACE_RANKS=N: N ranks (torchrun).
if [ -n "${PACE_TRAIN:-}" ]; then
  [ -f /tmp/pace/prepared-h5 ] || { python3 -m dataprep convert --input /tmp/cifar/train --format hdf5 \
    --output /tmp/c_h5 --quiet && touch /tmp/pace/prepared-h5; } || exit 1
  launch=(python3 -m training)
  [ -n "${PACE_RANKS:-}" ] && launch=(torchrun --standalone --nproc_per_node "$PACE_RANKS" -m training)
  IFS=';' read -ra runs <<< "$PACE_TRAIN"
  for r in "${runs[@]}"; do
    read -r tag data loader extra <<< "$r"
    case "$data" in h5) data=/tmp/c_h5;; lat) data=/tmp/lat;; s3lat) data=s3://data/lat;; esac
    rm -rf "/tmp/runs/$tag"; mkdir -p "/tmp/pace/train_$tag"
    cp /tmp/pace/link.json "/tmp/pace/train_$tag/link_before.json" 2>/dev/null
    timeout ${PACE_TRAIN_S:-240} "${launch[@]}" --data "$data" --loader "$loader" --model ddpm_cifar10 \
      --batch-size 128 --compile --steps ${PACE_STEPS:-800} --lr-warmup 0 --sample-every 0 --ckpt-every 0 \
      --log-every 50 --no-progress --out "/tmp/runs/$tag" $extra 2>&1 | tee "/tmp/pace/train_$tag/train.log" \
      | grep -v "^\[rank" | tail -n 8
    cp /tmp/pace/link.json "/tmp/pace/train_$tag/link_after.json" 2>/dev/null
    cp /tmp/runs/$tag/summary.json /tmp/runs/$tag/metrics*.jsonl "/tmp/pace/train_$tag/"
  done
fi
# PACE_OVERHEAD: worker counts for gpufeed's loader against LitData's own set alike (bench.studies.stream_overhead)
if [ -n "${PACE_OVERHEAD:-}" ]; then
  timeout ${PACE_OVERHEAD_S:-200} python3 -m bench.studies.stream_overhead --out /tmp/pace/overhead.json --images 50000 \
    --workers "$PACE_OVERHEAD" --rounds 2 2>&1 | tail -n 12
fi
tar -C /tmp/pace -cf "$OUT/stream_pace.tar" . && ls -la "$OUT"
