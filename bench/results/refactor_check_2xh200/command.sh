#!/usr/bin/env bash
# The step rate and the warm start of this tree against commit 73627c8 (before the code was reorganised): compiled
# ddpm_cifar10 b128 bf16 on GPU 0. Each tree's compile cache is filled first (three runs side by side, the local
# Inductor cache shared, so no cold compile is timed), then warm starts from the compile cache alone (an empty local
# Inductor folder each), alternated over two rounds: this tree, 73627c8, this tree with --compile-traced-program.
# Everything to $OUT/check42.tgz. The older tree travels as .devres/before42.tar (made before the call with
# `git archive -o .devres/before42.tar 73627c8`, then carried).
set -u
OUT=${OUT:-/tmp/out}; W=/tmp/check42; mkdir -p "$OUT" "$W"
[ -d /tmp/before/training ] || { mkdir -p /tmp/before && tar -xf .devres/before42.tar -C /tmp/before; }
[ -f /tmp/syn/manifest.json ] || python3 -m dataprep convert --source synthetic-images --limit 8192 --format hdf5 \
  --output /tmp/syn --quiet
nvidia-smi --query-gpu=name,uuid --format=csv > "$W/gpus.txt"; python3 -c "import torch; print(torch.__version__)" >> "$W/gpus.txt"
run() {  # NAME SRC COMPILE_CACHE INDUCTOR_DIR GPU [train options...]
  local name=$1 src=$2 cc=$3 ind=$4 gpu=$5 t0 t1; shift 5
  mkdir -p "$cc" && chmod 700 "$cc"
  t0=$(date +%s.%N)
  (cd "$src" && CUDA_VISIBLE_DEVICES=$gpu GPUFEED_COMPILE_CACHE=$cc TORCHINDUCTOR_CACHE_DIR=$ind timeout 150 python3 -m training \
    --data /tmp/syn --loader gpu --model ddpm_cifar10 --batch-size 128 --steps 300 --timing-warmup 100 --log-every 100 \
    --ckpt-every 0 --sample-every 0 --precision bf16 --compile --no-progress --out "/tmp/w-$name" "$@" > "$W/$name.log" 2>&1)
  t1=$(date +%s.%N)
  cp "/tmp/w-$name/summary.json" "$W/$name.json" 2>/dev/null
  python3 -c "import json; d=json.load(open('$W/$name.json')); c=d.get('compile',{}); print('$name', 'wall', round($t1-$t0,1), \
'rate', round(d['samples_per_s'],1), 'first_step', c.get('first_step_s'), 'since_launch', c.get('timed_since_launch_s'))" \
    >> "$W/warm.txt" 2>&1 || echo "$name failed" >> "$W/warm.txt"
  tar czf "$OUT/check42.tgz" -C "$W" .
}
IND=${TORCHINDUCTOR_CACHE_DIR:-/tmp/gpufeed-inductor}
run after-fill "$PWD" /tmp/cc-after "$IND" 0 &
run before-fill /tmp/before /tmp/cc-before "$IND" 1 &
wait
run traced-fill "$PWD" /tmp/cc-traced "$IND" 0 --compile-traced-program
for r in 1 2; do
  run after-warm$r "$PWD" /tmp/cc-after /tmp/ind-after-$r 0
  run before-warm$r /tmp/before /tmp/cc-before /tmp/ind-before-$r 0
  run traced-warm$r "$PWD" /tmp/cc-traced /tmp/ind-traced-$r 0 --compile-traced-program
done
cat "$W/warm.txt"
