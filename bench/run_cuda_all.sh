#!/usr/bin/env bash
# One device-tool call for the whole CUDA picture: the CUDA tests (run_cuda_tests.sh, optional
# GTEST_FILTER), the end-to-end generate rows (run_cuda_e2e.sh) and the engine's batch decode and
# mid-prefill table (run_cuda_engine.sh), inside the call's 600 s. Carry
# [".gpu/tests.tar.xz", ".gpu/e2e.tar.xz", ".gpu/lib"]. Logs come back as one $OUT/logs.tgz. Then, same-run
# baselines of the batched decode attention and of the GEMV (BASELINES=0: skip).
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
# Same-run baselines of the switches (docs/gpu.md): per-sequence decode attention at batch 32
# (TQ_BATCH_DECODE=0) and the first GEMV (TQ_GEMV=1) at batch 1.
if [ "${BASELINES:-1}" = 1 ] && [ $((575 - SECONDS)) -gt 60 ]; then
  export LD_LIBRARY_PATH=/tmp/e2e/lib:$R/.gpu/lib:$LD_LIBRARY_PATH
  M=${MODEL_DIR:-/tmp/qwen3-8b-random}
  TQ_BATCH_DECODE=0 timeout $((575 - SECONDS)) /tmp/e2e/bench_engine --model "$M" --device cuda \
    --context 8192 --tokens 32 --chunk 4096 --batch 32 --kv dense,turboquant --copy-prefill \
    > "$L/baseline_per_seq.md" 2>&1
  TQ_GEMV=1 timeout $((575 - SECONDS)) /tmp/e2e/bench_engine --model "$M" --device cuda \
    --context 8192 --tokens 32 --chunk 4096 --batch 1 --kv dense,turboquant \
    > "$L/baseline_gemv1.md" 2>&1
  echo "baselines done [$((SECONDS - t0)) s]"
fi
tar -C "$L" -czf "$FINAL/logs.tgz" .
tail -25 "$L/tests.txt"; echo; tail -22 "$L/e2e.txt"; echo; tail -30 "$L/engine.txt"
for f in baseline_per_seq baseline_gemv1; do [ -f "$L/$f.md" ] && { echo "## $f"; grep "|" "$L/$f.md"; }; done
