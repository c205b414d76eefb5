#!/usr/bin/env bash
# Finding 8 on the GPU machine, in one command (~8 minutes): carry .whl/stream (made by stream_carry.sh here), then
#   bash bench/studies/stream_gpu.sh [STUDY OPTIONS]     # e.g. --compile --models dit_b2 --rates 100e6,0 (last wins)
# It unpacks weed and the Python packages into /tmp, runs bench.studies.stream_gpu for ddpm_cifar10 (images) and
# dit_b2 (cached latents) on 2 and 4 cores at 100 MB/s, 1 GB/s and no cap with 0, 10 and 50 ms added each way,
# cache cold (epoch 1) and warm (epoch 2), and leaves every raw JSON in $OUT/stream_gpu.tar (and the log).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/site /tmp/weedbin "$OUT"
tar -C /tmp/site -xJf .whl/stream/site.tar.xz || exit 1
xz -dc .whl/stream/weed.xz > /tmp/weedbin/weed && chmod +x /tmp/weedbin/weed || exit 1
export PYTHONPATH=/tmp/site:$PWD GPUFEED_WEED=/tmp/weedbin/weed
python3 -c 'import torch, litdata, boto3; print(torch.__version__, torch.cuda.get_device_name(), litdata.__version__)'
timeout ${STREAM_TIMEOUT:-560} python3 -m bench.studies.stream_gpu --out "$OUT/stream_gpu" --models ddpm_cifar10,dit_b2 --cores ${STREAM_CORES:-2,4} \
  --images 8192 --latents 3072 --device cuda "$@" 2>&1 | tee "$OUT/stream_gpu.log"
cp "$OUT/stream_gpu/stream_gpu.tar" "$OUT/" 2>/dev/null || tar -C "$OUT/stream_gpu" -cf "$OUT/stream_gpu.tar" .
rm -rf "$OUT/stream_gpu"
