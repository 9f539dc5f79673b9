#!/usr/bin/env bash
# One device-tool call for the prefill attention kernels: their unit tests, bench_cuda_prefill
# (default kernels, then the TQ_PREFILL_VARIANT=1 and 3 kernels at d=128), and the same-run PyTorch SDPA
# baseline; logs under $OUT, the merged table printed last. Binaries prebuilt in .gpu/bin.
# Usage (on the device, carry .gpu/bin and .gpu/lib): bash bench/run_cuda_prefill.sh [--no-tests]
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/smi.txt"
if [ "$1" != --no-tests ]; then
  timeout 120 .gpu/bin/unit_backend_cuda --gtest_filter='CudaPrefillAttention.*' > "$OUT/unit.log" 2>&1
  echo "unit_backend_cuda rc=$?" >> "$OUT/unit.log"
  for v in 1 3; do
    TQ_PREFILL_VARIANT=$v timeout 120 .gpu/bin/unit_backend_cuda --gtest_filter='CudaPrefillAttention.*' > /tmp/unit_v$v.log 2>&1
    echo "unit_backend_cuda (TQ_PREFILL_VARIANT=$v) rc=$?" >> /tmp/unit_v$v.log
    cat /tmp/unit_v$v.log >> "$OUT/unit_variants.log"
  done
fi
timeout 60 .gpu/bin/bench_cuda_prefill --csv /tmp/ours.csv > "$OUT/bench.log" 2>&1
TQ_PREFILL_VARIANT=1 timeout 60 .gpu/bin/bench_cuda_prefill --tag _v1 --csv /tmp/ours2.csv >> "$OUT/bench.log" 2>&1
TQ_PREFILL_VARIANT=3 timeout 60 .gpu/bin/bench_cuda_prefill --tag _v3 --csv /tmp/ours3.csv >> "$OUT/bench.log" 2>&1
PYTHONUNBUFFERED=1 timeout 90 python3 bench/bench_cuda_sdpa_prefill.py /tmp/ours.csv,/tmp/ours2.csv,/tmp/ours3.csv "$OUT/table.md" > "$OUT/sdpa.log" 2>&1
grep -E "FAILED|PASSED|rel err|rc=|Failure|Expected|Which is" "$OUT/unit.log" 2>/dev/null | tail -40
grep -E "FAILED|PASSED|rc=|tq4 .*one" "$OUT/unit_variants.log" 2>/dev/null
cat "$OUT/smi.txt"
cat "$OUT/bench.log"
grep -vE "^\|" "$OUT/sdpa.log" | tail -8
cat "$OUT/table.md"
