#!/usr/bin/env bash
# One device-tool call for the Hopper prefill kernel (prefill_wgmma.cu): its tests, H1's
# CudaPrefillAttention suite routed through it (TQ_PREFILL_WGMMA=1), bench_cuda_prefill (bf16)
# with the wgmma kernel and with the mma.sync kernel, and the same-run SDPA baseline; logs under
# $OUT, table last. Binaries prebuilt in .gpu/bin as unit_backend_cuda_h5, bench_cuda_prefill_h5.
# Usage (on the device, carry .gpu/bin and .gpu/lib): bash bench/run_cuda_prefill_wgmma.sh
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
U=.gpu/bin/unit_backend_cuda_h5 B=.gpu/bin/bench_cuda_prefill_h5
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/smi.txt"
timeout 40 $U --gtest_filter='CudaPrefillWgmma.*' > "$OUT/unit_wg.log" 2>&1
rc=$?; echo "wgmma tests rc=$rc" >> "$OUT/unit_wg.log"
TQ_PREFILL_WGMMA=1 timeout 60 $U --gtest_filter='CudaPrefillAttention.*' > "$OUT/unit_h1suite.log" 2>&1
echo "CudaPrefillAttention.* with TQ_PREFILL_WGMMA=1 rc=$?" >> "$OUT/unit_h1suite.log"
TQ_PREFILL_WGMMA=0 timeout 40 $B --bf16-only --tag _mma --csv /tmp/mma.csv > "$OUT/bench.log" 2>&1
TQ_PREFILL_WGMMA=1 timeout 40 $B --bf16-only --tag _wgmma --csv /tmp/wg.csv >> "$OUT/bench.log" 2>&1
PYTHONUNBUFFERED=1 timeout 80 python3 bench/bench_cuda_sdpa_prefill.py /tmp/mma.csv,/tmp/wg.csv "$OUT/table.md" > "$OUT/sdpa.log" 2>&1
grep -E "FAILED|PASSED|rel err|rc=|Failure|Expected|Which is|Skipped|SKIP" "$OUT"/unit_wg*.log | tail -40
grep -E "FAILED|PASSED|rc=|bf16 d=128" "$OUT/unit_h1suite.log" | tail -20
cat "$OUT/smi.txt" "$OUT/bench.log"
grep -vE "^\|" "$OUT/sdpa.log" | tail -8
cat "$OUT/table.md"
