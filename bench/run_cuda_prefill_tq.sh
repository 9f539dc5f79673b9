#!/usr/bin/env bash
# One device-tool call for the TurboQuant wgmma prefill kernel: prefill + TurboQuant cache tests
# (both producer decodes, bit-compared), bench_cuda_prefill (dense wgmma, H1's TQ4 mma.sync
# kernel, the TQ4 wgmma kernel with H8's table decode and with the ALU decode), any variant
# builds .gpu/hq/bench_* (same rows, tagged), the same-run SDPA baseline, the ALU kernel's SASS
# and an ncu stall profile of it. Binaries prebuilt in $G (default .gpu/hq: unit_backend_cuda,
# bench; carry it and .gpu/lib); logs under $OUT, table last.
set -o pipefail
R=$PWD
G=${G:-.gpu/hq}
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > "$OUT/smi.txt"
timeout 70 $G/unit_backend_cuda --gtest_filter='*Prefill*:*TqCache*' > "$OUT/unit.log" 2>&1
echo "unit_backend_cuda rc=$?" >> "$OUT/unit.log"
TQ_PREFILL_WGMMA_TQ=0 timeout 20 $G/unit_backend_cuda --gtest_filter='CudaPrefillAttention.TurboQuant*' >> "$OUT/unit.log" 2>&1
echo "unit (TQ_PREFILL_WGMMA_TQ=0) rc=$?" >> "$OUT/unit.log"
timeout 30 $G/bench --csv /tmp/ours.csv > "$OUT/bench.log" 2>&1
echo "bench rc=$?" >> "$OUT/bench.log"
csvs=/tmp/ours.csv
for b in $G/bench_*; do
  [ -x "$b" ] || continue
  n=${b##*/bench_}
  timeout 30 $b --tag "_$n" --csv /tmp/$n.csv >> "$OUT/bench.log" 2>&1
  echo "bench_$n rc=$?" >> "$OUT/bench.log"
  csvs=$csvs,/tmp/$n.csv
done
PYTHONUNBUFFERED=1 timeout 45 python3 bench/bench_cuda_sdpa_prefill.py $csvs "$OUT/table.md" > "$OUT/sdpa.log" 2>&1
OUT=$OUT timeout 40 bash bench/sass_kernel_ops.sh $G/bench alu prefill_wgmma_kernelILi2E >> "$OUT/bench.log" 2>&1
NCU=$(command -v ncu || find /usr/local /opt -name ncu -type f 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  timeout 60 $NCU --kernel-name-base demangled --kernel-name regex:'prefill_wgmma_kernel<.int.2>' --launch-count 1 \
    --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section SourceCounters --section SpeedOfLight $G/bench --quick > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?" >> "$OUT/ncu.txt"
fi
grep -E "FAILED|PASSED|rel err|rc=|Failure|Expected|Which is|differ|error" "$OUT/unit.log" | tail -45
cat "$OUT/smi.txt" "$OUT/bench.log"
grep -E "Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Stall|Duration|rc=" "$OUT/ncu.txt" 2>/dev/null | head -20
tail -12 "$OUT/table.md" 2>/dev/null || tail -5 "$OUT/sdpa.log"
