#!/usr/bin/env bash
# One device-tool call: the CUDA test binaries (unit_backend_cuda, golden_cuda) with the
# tiny-qwen3 fixture, all packed in .gpu/tests.tar.xz (bin/ + shared/models/tiny-qwen3; docs/gpu.md),
# then the TurboQuant prefill tests again on the two-launch path (TQ_PREFILL_ONE_LAUNCH=0).
# Carry [".gpu/tests.tar.xz", ".gpu/lib"]. Logs under $OUT; failures and a summary printed last.
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/gt && tar -C /tmp/gt -xJf .gpu/tests.tar.xz
# The tests find models/ through the build's source directory (/work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$R" /work/main; }
export TQ_SHARED_DIR=/tmp/gt/shared
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
for t in unit_backend_cuda golden_cuda; do
  timeout 240 /tmp/gt/bin/$t ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} > "$OUT/$t.log" 2>&1
  echo "$t rc=$?" >> "$OUT/summary.txt"
done
# The TurboQuant prefill's two-launch path (records, rows, merge), which the Hopper kernel's
# one-launch variant replaces by default: its cache and prefill tests again.
TQ_PREFILL_ONE_LAUNCH=0 timeout 240 /tmp/gt/bin/unit_backend_cuda \
  --gtest_filter="${GTEST_FILTER_TWO_LAUNCH:-CudaTqCache*:CudaPrefill*}" > "$OUT/unit_backend_cuda-two-launch.log" 2>&1
echo "unit_backend_cuda (TQ_PREFILL_ONE_LAUNCH=0) rc=$?" >> "$OUT/summary.txt"
grep -hE "^\[  FAILED|Failure|error|Error" "$OUT"/*.log | head -60
grep -hE "^\[  PASSED|^\[  FAILED  \] [0-9]+ test|tests ran" "$OUT"/*.log
cat "$OUT/summary.txt"
