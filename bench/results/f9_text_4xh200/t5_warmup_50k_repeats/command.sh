#!/usr/bin/env bash
# T5-XL-sized captions of all 50,000 CIFAR-10 train JPEGs, `convert --text-encoder` on 1 GPU and on 4 of a 4xH200
# host at commit 1629965, repeated; one 4-GPU run under py-spy (every rank's threads, idle samples too). Run from the
# repository root with ../shared/datasets/cifar10-jpg.tar.gz copied to .devdata/, py-spy's wheel in .devdata/pyspy/
# and the text stack as .whl/text/site.tar.xz (bench/studies/text_carry.sh). The first call ran the default STEPS,
# the second STEPS="one1 base4 one1b base4b" on the same machine. The set-up step passed no commit (host.json said
# "x"), so its record is not kept: ../provenance.json records the host.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=/tmp/gpufeed-text-data50; R=/tmp/t5prof; mkdir -p $R
export GPUFEED_DATA=$D GPUFEED_RESULTS=/tmp/gpufeed-text50 CONVERT4_IMAGES=.devdata/cifar10-jpg.tar.gz
[ -d $D/enc/t5-xl ] || GPUFEED_COMMIT=x CONVERT4_PARTS=none bash bench/studies/text_gpu.sh convert4 2>&1 | tail -3
[ -x /tmp/pyspy/bin/py-spy ] || python3 -m pip install -q --no-deps --target /tmp/pyspy .devdata/pyspy/*.whl
export PYTHONPATH=$PWD:/tmp/textsite:/tmp/streamsite
run=(-m dataprep convert --input $D/img/train --quiet --timings --overwrite --format hdf5 --text-encoder $D/enc/t5-xl --batch-size 64)
one() {  # one NAME GPUS [env...]
  local name=$1 g=$2; shift 2
  t0=$(date +%s%N)
  env "$@" GPUFEED_HASH_BOOK=$(mktemp -u /tmp/hb-XXXX.json) torchrun --standalone --nproc_per_node $g "${run[@]}" --output $D/p_$name > $R/$name.txt 2>&1
  echo "$name $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(grep -E '^text: encode' $R/$name.txt)"
}
for s in ${STEPS:-omp16 spy one_omp1}; do
  case $s in
    omp16) one omp16 4 OMP_NUM_THREADS=16 ;;
    base4) one base4 4 ;;
    base4b) one base4b 4 ;;
    one1) one one1 1 ;;
    one1b) one one1b 1 ;;
    one_omp1) one one_omp1 1 OMP_NUM_THREADS=1 ;;
    spy)
      t0=$(date +%s%N)
      GPUFEED_HASH_BOOK=$(mktemp -u /tmp/hb-XXXX.json) /tmp/pyspy/bin/py-spy record --subprocesses --idle --nonblocking --rate 100 -f speedscope -o $R/spy4.json -- \
        torchrun --standalone --nproc_per_node 4 "${run[@]}" --output $D/p_spy > $R/spy.txt 2>&1
      echo "spy $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(grep -E '^text: encode' $R/spy.txt)"
      xz -T0 -6 $R/spy4.json ;;
  esac
  cp $R/*.txt $R/*.xz "$OUT/" 2>/dev/null
done
