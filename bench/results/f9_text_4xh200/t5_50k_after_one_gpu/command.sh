#!/usr/bin/env bash
# T5-XL-sized captions of all 50,000 CIFAR-10 train JPEGs, `convert --text-encoder` on 1 GPU and on 4 of a 4xH200
# host at commit 984cb68, each 4-GPU run right after a 1-GPU run but one (after a `sync`, and one after a 4-GPU run),
# with the kernel's dirty and writeback pages (meminfo_call*.txt, every 0.5 s), vmstat and the GPUs' clocks recorded
# beside them; the 4-GPU run after the first 1-GPU run under py-spy. Run from the repository root with
# ../shared/datasets/cifar10-jpg.tar.gz copied to .devdata/, py-spy's wheel in .devdata/pyspy/ and the text stack as
# .whl/text/site.tar.xz (bench/studies/text_carry.sh). Two calls on one machine: the first with the default STEPS and
# GPUFEED_COMMIT=984cb68a8264caa929859c512d232ac1f4cbf90b (its set-up wrote host.json), the second with
# STEPS="one1b base4b base4c one1c base4d". walls.txt: each command's wall time, torchrun to its exit, in the order run.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
D=/tmp/gpufeed-text-data50; R=/tmp/t5prof; mkdir -p $R
export GPUFEED_DATA=$D GPUFEED_RESULTS=/tmp/gpufeed-text50 CONVERT4_IMAGES=.devdata/cifar10-jpg.tar.gz
[ -d $D/enc/t5-xl ] || GPUFEED_COMMIT=${GPUFEED_COMMIT:-x} CONVERT4_PARTS=none bash bench/studies/text_gpu.sh convert4 2>&1 | tail -3
cp -r $GPUFEED_RESULTS "$OUT/setup_results" 2>/dev/null
[ -x /tmp/pyspy/bin/py-spy ] || python3 -m pip install -q --no-deps --target /tmp/pyspy .devdata/pyspy/*.whl
export PYTHONPATH=$PWD:/tmp/textsite:/tmp/streamsite
{ df -h /tmp; grep . /proc/sys/vm/dirty_*; cat /sys/fs/cgroup/memory.max 2>/dev/null; free -g; nproc; mount | grep -E ' /tmp | / ' ; } > $R/host.txt 2>&1
( while :; do echo "$(date +%s.%N) $(grep -E '^(Dirty|Writeback|Cached|MemFree):' /proc/meminfo | awk '{printf "%s%s ", $1,$2}')"; sleep 0.5; done ) > $R/mem.txt 2>&1 &
MP=$!
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,clocks_throttle_reasons.active --format=csv -lms 500 > $R/smi.csv 2>&1 &
SP=$!
vmstat -t 1 > $R/vmstat.txt 2>&1 &
VP=$!
run=(-m dataprep convert --input $D/img/train --quiet --timings --overwrite --format hdf5 --text-encoder $D/enc/t5-xl --batch-size 64)
mark() { echo "$(date +%s.%N) $*" >> $R/marks.txt; }
one() {  # one NAME GPUS [env...]
  local name=$1 g=$2; shift 2
  mark start $name
  t0=$(date +%s%N)
  env "$@" GPUFEED_HASH_BOOK=$(mktemp -u /tmp/hb-XXXX.json) torchrun --standalone --nproc_per_node $g "${run[@]}" --output $D/p_$name > $R/$name.txt 2>&1
  echo "$name $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(grep -E '^text: encode' $R/$name.txt)" | tee -a $R/walls.txt
  mark end $name
}
for s in ${STEPS:-one1 spy sync base4}; do
  case $s in
    one1|one1b|one1c) one $s 1 ;;
    base4|base4b|base4c|base4d) one $s 4 ;;
    sync) mark start sync; t0=$(date +%s%N); sync; echo "sync $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a $R/walls.txt; mark end sync ;;
    spy|spyb)
      mark start $s
      t0=$(date +%s%N)
      GPUFEED_HASH_BOOK=$(mktemp -u /tmp/hb-XXXX.json) /tmp/pyspy/bin/py-spy record --subprocesses --idle --nonblocking --rate 100 -f speedscope -o $R/$s.json -- \
        torchrun --standalone --nproc_per_node 4 "${run[@]}" --output $D/p_$s > $R/$s.txt 2>&1
      echo "$s $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(grep -E '^text: encode' $R/$s.txt)" | tee -a $R/walls.txt
      mark end $s
      xz -T0 -6 $R/$s.json ;;
  esac
  cp $R/* "$OUT/" 2>/dev/null
done
kill $MP $SP $VP 2>/dev/null
cp $R/* "$OUT/" 2>/dev/null
