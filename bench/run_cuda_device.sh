#!/usr/bin/env bash
# One device-tool call: CUDA kernel tests, the decode-attention benchmark next to PyTorch SDPA,
# a loads-only probe and an Nsight Compute profile of the TQ4 kernel (B=8, 32K). Binaries come
# prebuilt in .gpu/bin (docs/gpu.md). Logs under $OUT; the merged table is printed last.
# At most 8 files under $OUT (the device tool returns no more).
# --compare adds same-run variants of the TQ4 kernel (TQ_DECODE_NO_SWIZZLE=1, TQ_DECODE_PDL=0) and
# the B=1 fixed-cost probes (TQ_DECODE_MODE=1 loads only, 2 no loads/no math, 3 empty launch).
# BIN (default .gpu/bin) is where the stripped binaries are; TESTS_FILTER a gtest filter;
# NCU_TIMEOUT seconds for the profile (200).
# Usage (on the device): bash bench/run_cuda_device.sh [--no-ncu] [--no-tests] [--compare]
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ncu_on=1; tests_on=1; compare=0
BIN=${BIN:-.gpu/bin}
for a in "$@"; do
  [ "$a" = --no-ncu ] && ncu_on=0
  [ "$a" = --no-tests ] && tests_on=0
  [ "$a" = --compare ] && compare=1
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > "$OUT/smi.txt"
if [ $tests_on = 1 ]; then
  $BIN/unit_backend_cuda --gtest_filter="${TESTS_FILTER:-*}" > "$OUT/unit.log" 2>&1
  echo "unit_backend_cuda rc=$?" >> "$OUT/unit.log"
fi
$BIN/bench_cuda_attention --decode-only --csv /tmp/ours.csv > "$OUT/bench.log" 2>&1
TQ_DECODE_MODE=1 $BIN/bench_cuda_attention --decode-only --quick > "$OUT/probe_loads.log" 2>&1
PYTHONUNBUFFERED=1 python3 bench/bench_cuda_sdpa.py /tmp/ours.csv "$OUT/table.md" > "$OUT/sdpa.log" 2>&1
if [ $compare = 1 ]; then  # one log: variants (full decode table) and B=1 probes (32K)
  { echo "== TQ_DECODE_NO_SWIZZLE=1"; TQ_DECODE_NO_SWIZZLE=1 timeout 60 $BIN/bench_cuda_attention --decode-only
    echo "== TQ_DECODE_PDL=0"; TQ_DECODE_PDL=0 timeout 60 $BIN/bench_cuda_attention --decode-only
    for m in 1 2 3; do echo "== TQ_DECODE_MODE=$m B=1"
      TQ_DECODE_MODE=$m timeout 20 $BIN/bench_cuda_attention --decode-only --quick --batch 1; done
  } > "$OUT/compare.log" 2>&1
fi
if [ $ncu_on = 1 ]; then
  NCU=$(command -v ncu || find / -name ncu -type f 2>/dev/null | head -1)
  timeout ${NCU_TIMEOUT:-200} "$NCU" --clock-control none -k regex:tq128 --launch-skip 8 -c 1 --set full \
    --import-source no -o "$OUT/prof" "$R/$BIN/bench_cuda_attention" --decode-only --quick \
    --batch 8 > /tmp/ncu_run.txt 2>&1
  "$NCU" --import "$OUT/prof.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
  "$NCU" --import "$OUT/prof.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_sass.csv" 2>&1
  rm -f "$OUT/prof.ncu-rep"
  grep -E "Duration|Registers Per|Issued Ipc|Executed Instructions  |No Eligible|Achieved Occ|DRAM Throughput" "$OUT/ncu_details.txt"
fi
grep -E "FAILED|PASSED|rel err|rc=" "$OUT/unit.log" 2>/dev/null | tail -25
grep -E "tq4|ceiling|blocks" "$OUT/probe_loads.log"
[ $compare = 1 ] && grep -E "^==|tq4_decode " "$OUT/compare.log"
cat "$OUT/smi.txt"
grep -E "ceiling|blocks per SM" "$OUT/bench.log"
cat "$OUT/table.md"
