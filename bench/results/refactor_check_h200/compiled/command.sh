#!/usr/bin/env bash
# compiled: cold run then warm run from the compile cache (fresh local Inductor dir), after vs before; to $OUT as they come
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d /tmp/before/training ] || { mkdir -p /tmp/before && tar -xf .devres/before42.tar -C /tmp/before; }
[ -f /tmp/syn/manifest.json ] || python3 -m dataprep convert --source synthetic-images --limit 8192 --format hdf5 --output /tmp/syn --quiet
for v in after before; do
  src=$([ $v = before ] && echo /tmp/before || echo "$PWD")
  mkdir -p /tmp/cc-$v && chmod 700 /tmp/cc-$v
  for phase in cold warm; do
    t0=$(date +%s.%N)
    (cd "$src" && GPUFEED_COMPILE_CACHE=/tmp/cc-$v TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$v-$phase timeout 170 python3 -m training \
      --data /tmp/syn --loader gpu --model ddpm_cifar10 --batch-size 128 --steps 300 --timing-warmup 100 --log-every 100 \
      --ckpt-every 0 --sample-every 0 --precision bf16 --compile --no-progress --out /tmp/w-$v-$phase > /tmp/w-$v-$phase.log 2>&1)
    t1=$(date +%s.%N)
    cp /tmp/w-$v-$phase/summary.json "$OUT/$v-$phase.json" 2>/dev/null; cp /tmp/w-$v-$phase.log "$OUT/$v-$phase.log"
    python3 -c "import json; d=json.load(open('/tmp/w-$v-$phase/summary.json')); c=d.get('compile',{}); print('$v', '$phase', 'wall', round($t1-$t0,1), 'rate', round(d['samples_per_s'],1), 'first_step', c.get('first_step_s'), 'since_launch', c.get('timed_since_launch'))" >> "$OUT/warm.txt" 2>&1
  done
done
cat "$OUT/warm.txt"
