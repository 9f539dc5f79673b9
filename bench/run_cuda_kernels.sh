#!/usr/bin/env bash
# One device-tool call for the issue's kernel bars, on whatever card the call got: the CUDA tests
# (run_cuda_tests.sh), then the prefill attention (bench_cuda_prefill, causal 4K / 32K and the
# engine's records pass, `--records`) and the decode attention (bench_cuda_attention
# --decode-only), each followed by its same-run PyTorch SDPA baseline (bench_cuda_sdpa_prefill.py,
# bench_cuda_sdpa.py). Binaries come in .gpu/tests.tar.xz (bench/pack_cuda_archives.sh).
# Carry [".gpu/tests.tar.xz", ".gpu/lib"]. Logs come back as $OUT/logs.tgz with the two merged
# tables ($OUT/prefill_table.md, $OUT/decode_table.md), which are printed last.
# TESTS=0 skips the tests; PREFILL_ARGS / DECODE_ARGS add arguments to the two benchmarks.
set -o pipefail
W=/tmp/kernels
# shellcheck source=bench/device_common.sh
. "$(dirname "$0")/device_common.sh"
L=$W/logs
mkdir -p "$L"
t0=$SECONDS
if [ "${TESTS:-1}" = 1 ]; then
  OUT=$L/tests bash bench/run_cuda_tests.sh > "$L/tests.txt" 2>&1
  tail -6 "$L/tests.txt"; echo "tests [$((SECONDS - t0)) s]"
else
  mkdir -p /tmp/gt && tar -C /tmp/gt -xJf .gpu/tests.tar.xz
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
# shellcheck disable=SC2086  # the ARGS are words
timeout 200 /tmp/gt/bin/bench_cuda_prefill --records --csv "$W/prefill.csv" ${PREFILL_ARGS:-} \
  > "$L/prefill.txt" 2>&1
echo "prefill rc=$? [$((SECONDS - t0)) s]"
PYTHONUNBUFFERED=1 timeout 90 python3 bench/bench_cuda_sdpa_prefill.py "$W/prefill.csv" \
  "$OUT/prefill_table.md" > "$L/sdpa_prefill.log" 2>&1
echo "sdpa prefill rc=$? [$((SECONDS - t0)) s]"
# shellcheck disable=SC2086
timeout 150 /tmp/gt/bin/bench_cuda_attention --decode-only --csv "$W/decode.csv" ${DECODE_ARGS:-} \
  > "$L/decode.txt" 2>&1
echo "decode rc=$? [$((SECONDS - t0)) s]"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/bench_cuda_sdpa.py "$W/decode.csv" "$OUT/decode_table.md" \
  > "$L/sdpa_decode.log" 2>&1
echo "sdpa decode rc=$? [$((SECONDS - t0)) s]"
grep -vE "^\s*$" "$L/prefill.txt" | tail -40
tar -C "$L" -czf "$OUT/logs.tgz" .
cat "$OUT/prefill_table.md" "$OUT/decode_table.md"
