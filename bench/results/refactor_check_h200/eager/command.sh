#!/usr/bin/env bash
# eager step rate: before the refactor (73627c8) vs this tree, alternated, one GPU; results to $OUT as they come
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/before
tar -xf .devres/before42.tar -C /tmp/before
nvidia-smi --query-gpu=name,uuid --format=csv > "$OUT/gpus.txt"
python3 -c "import torch; print(torch.__version__)" >> "$OUT/gpus.txt"
python3 -m dataprep convert --source synthetic-images --limit 8192 --format hdf5 --output /tmp/syn --quiet
for round in 1 2; do for v in after before; do
  src=$([ $v = before ] && echo /tmp/before || echo "$PWD")
  (cd "$src" && timeout 45 python3 -m training --data /tmp/syn --loader gpu --model ddpm_cifar10 --batch-size 128 \
    --steps 250 --timing-warmup 50 --log-every 50 --ckpt-every 0 --sample-every 0 --precision bf16 --no-progress \
    --out /tmp/r-$v-$round > /tmp/r-$v-$round.log 2>&1)
  cp /tmp/r-$v-$round/summary.json "$OUT/$v-$round.json" 2>/dev/null || tail -5 /tmp/r-$v-$round.log > "$OUT/$v-$round.err"
  python3 -c "import json; d=json.load(open('/tmp/r-$v-$round/summary.json')); print('$v', $round, round(d['samples_per_s'],1))" >> "$OUT/rates.txt" 2>&1
done; done
cat "$OUT/rates.txt"
