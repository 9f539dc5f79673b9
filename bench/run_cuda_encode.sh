#!/usr/bin/env bash
# One device-tool call for the TurboQuant prefill helpers: the CUDA tests, bench_cuda_tq_encode
# with the group encoder and with the one-warp baseline (TQ_ENCODE_KERNEL=warp), then the
# mid-prefill A/B of bench/run_cuda_midprefill_ab.sh with the same bench_engine run both ways:
# old with OLD_ENV set (default TQ_ENCODE_KERNEL=warp: the warp encoder and the f32 conversion
# copy; e.g. TQ_PREFILL_CONCURRENT=0), new as it is. Carry ".gpu/enc" (unit_backend_cuda.xz,
# bench_cuda_tq_encode), ".gpu/e2e.tar.xz" and ".gpu/lib". TESTS_FILTER narrows the tests.
set -o pipefail
R=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/enc
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
B=$R/.gpu/enc
for v in group warp; do
  if [ $v = warp ]; then TQ_ENCODE_KERNEL=warp "$B/bench_cuda_tq_encode"; else "$B/bench_cuda_tq_encode"; fi
done 2>&1 | tee "$OUT/encode.txt"
# The baseline: the same bench_engine with the old encoder and conversion path.
tar -C /tmp/enc -xJf .gpu/e2e.tar.xz ./bench_engine
printf '#!/bin/sh\nexec env %s /tmp/enc/bench_engine "$@"\n' "${OLD_ENV:-TQ_ENCODE_KERNEL=warp}" > /tmp/enc/old_engine
chmod +x /tmp/enc/old_engine
OLD_BENCH=/tmp/enc/old_engine NEW_BENCH=/tmp/enc/bench_engine \
  TESTS="$B/unit_backend_cuda.xz ${TESTS_FILTER:-*}" bash bench/run_cuda_midprefill_ab.sh
echo "== encode"; cat "$OUT/encode.txt"
