#!/usr/bin/env bash
# One device-tool call for the TurboQuant wgmma prefill kernel: prefill + TurboQuant cache tests,
# bench_cuda_prefill (dense wgmma, H1's TQ4 mma.sync kernel, the TQ4 wgmma kernel), SDPA baseline.
# Binaries prebuilt in .gpu/h8 (carry .gpu/h8 and .gpu/lib); logs under $OUT, table last.
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/smi.txt"
timeout 60 .gpu/h8/unit_backend_cuda_h8 --gtest_filter='*Prefill*:*TqCache*' > "$OUT/unit.log" 2>&1
echo "unit_backend_cuda rc=$?" >> "$OUT/unit.log"
TQ_PREFILL_WGMMA_TQ=0 timeout 20 .gpu/h8/unit_backend_cuda_h8 --gtest_filter='CudaPrefillAttention.TurboQuant*' > "$OUT/unit_mma.log" 2>&1
echo "unit (TQ_PREFILL_WGMMA_TQ=0) rc=$?" >> "$OUT/unit_mma.log"
timeout 30 .gpu/h8/bench_cuda_prefill_h8 --csv /tmp/ours.csv > "$OUT/bench.log" 2>&1
echo "bench rc=$?" >> "$OUT/bench.log"
PYTHONUNBUFFERED=1 timeout 30 python3 bench/bench_cuda_sdpa_prefill.py /tmp/ours.csv "$OUT/table.md" > "$OUT/sdpa.log" 2>&1
grep -E "FAILED|PASSED|rel err|rc=|Failure|Expected|Which is|error" "$OUT/unit.log" | tail -45
grep -E "FAILED|PASSED|rc=|tq4" "$OUT/unit_mma.log"
cat "$OUT/smi.txt" "$OUT/bench.log"
tail -12 "$OUT/table.md" 2>/dev/null || tail -5 "$OUT/sdpa.log"
