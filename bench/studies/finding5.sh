#!/usr/bin/env bash
# Finding 5: the training loops people already run, measured unchanged by `bench watch --compare` on one GPU machine:
# lucidrains' Trainer (bench/studies/lucidrains_trainer.py) and the diffusers-style program
# (examples/diffusers_unconditional.py), each as shipped, on 4 cores, and fed by gpufeed.
#
#   bash bench/studies/finding5.sh prep lucidrains diffusers gputest
#
# From the repository root of a GPU machine with the real CIFAR-10 JPEGs in .devdata/cifar10-jpg.tar.gz. A variant
# whose watch.json exists is skipped, so a cut-short call continues where it stopped; results are archived to $OUT
# after every variant. GPUFEED_COMMIT names the commit where the tree has no .git.
set -uo pipefail
RES=${F5_RESULTS:-bench/results/f5_watch}
DATA=${F5_DATA:-/tmp/gpufeed-f5}
STEPS=${F5_STEPS:-200}
REPEATS=${F5_REPEATS:-2}
OUT=${OUT:-/tmp/f5-out}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY=${PY:-python3}  # the interpreter that has torch there
mkdir -p "$RES" "$OUT" "$DATA"
JPG=$DATA/jpg/train
archive() { tar czf "$OUT/f5.tgz" -C "$(dirname "$RES")" "$(basename "$RES")"; }

prep() {
  [ -f "$DATA/cifar10/manifest.json" ] && return
  mkdir -p "$DATA/jpg" && tar xzf .devdata/cifar10-jpg.tar.gz -C "$DATA/jpg"
  $PY -m dataprep convert --input "$DATA/jpg" --split train --output "$DATA/cifar10" --format hdf5,ffcv --quiet
}

watch() {  # NAME [bench watch options] -- COMMAND...
  local name=$1
  shift
  if [ -f "$RES/$name/watch.json" ]; then echo "$name: done before"; return; fi
  echo "== $name"
  $PY -m bench watch --out "$RES/$name" --compare --repeats "$REPEATS" --timing-warmup 30 --every 0 "$@" \
    2>&1 | grep -v "it/s\]" | tee "$OUT/$name.log" | tail -8
  archive
}

lucidrains() {
  local run=($PY -m bench.studies.lucidrains_trainer --folder "$JPG" --steps "$STEPS")
  watch lucidrains-shipped -- "${run[@]}"
  watch lucidrains-cpus4 --cpus 4 -- "${run[@]}"
  watch lucidrains-gpufeed-ffcv4 -- "${run[@]}" --gpufeed "$DATA/cifar10" --backend ffcv --workers 4
  watch lucidrains-gpufeed-gpu -- "${run[@]}" --gpufeed "$DATA/cifar10" --backend gpu
}

diffusers() {
  local run=($PY examples/diffusers_unconditional.py --steps "$STEPS")
  watch diffusers-shipped -- "${run[@]}" --folder "$JPG" --workers 0
  watch diffusers-cpus4 --cpus 4 -- "${run[@]}" --folder "$JPG" --workers 0
  watch diffusers-gpufeed-ffcv4 -- "${run[@]}" --data "$DATA/cifar10" --loader ffcv --workers 4
  watch diffusers-gpufeed-ffcv4-log100 -- "${run[@]}" --data "$DATA/cifar10" --loader ffcv --workers 4 --log-every 100
}

gputest() {
  $PY -m pytest -m gpu -q -p no:cacheprovider tests/bench/test_bench_watch.py 2>&1 | tee "$OUT/pytest_gpu_watch.txt" | tail -15
}

for step in "$@"; do "$step"; done
$PY -m bench report "$RES" >/dev/null && archive
