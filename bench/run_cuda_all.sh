#!/usr/bin/env bash
# One device-tool call for the whole CUDA picture: the CUDA tests (run_cuda_tests.sh, optional
# GTEST_FILTER), the end-to-end generate rows (run_cuda_e2e.sh) and the engine's batch decode and
# mid-prefill table (run_cuda_engine.sh), inside the call's 600 s. Carry
# [".gpu/tests.tar.xz", ".gpu/e2e.tar.xz", ".gpu/lib"]. Logs come back as one $OUT/logs.tgz.
R=$PWD
FINAL=${OUT:-/tmp/out}
L=/tmp/cuda_all_logs
mkdir -p "$FINAL" "$L"
t0=$SECONDS
OUT=$L/tests timeout ${TESTS_S:-150} bash bench/run_cuda_tests.sh > "$L/tests.txt" 2>&1
echo "tests done [$((SECONDS - t0)) s]"
OUT=$L/e2e timeout ${E2E_S:-240} bash bench/run_cuda_e2e.sh > "$L/e2e.txt" 2>&1
echo "e2e done [$((SECONDS - t0)) s]"
OUT=$L/engine timeout $((570 - SECONDS)) bash bench/run_cuda_engine.sh > "$L/engine.txt" 2>&1
echo "engine done [$((SECONDS - t0)) s]"
tar -C "$L" -czf "$FINAL/logs.tgz" .
tail -25 "$L/tests.txt"; echo; tail -22 "$L/e2e.txt"; echo; tail -30 "$L/engine.txt"
