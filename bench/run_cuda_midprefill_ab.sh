#!/usr/bin/env bash
# One device-tool call: the mid-prefill cost of a build against its baseline, and where it goes.
# `bench_engine --mid-prefill --context 32768 --convert-at 16384 --chunk 4096` (a dense prefill of
# the prompt, then the same prompt with a forced conversion at 16K, one process) for OLD_BENCH and
# NEW_BENCH (bench_engine binaries, .xz accepted), alternating for ROUNDS rounds (default 2); then
# a CUPTI kernel trace (bench/cupti_trace.cpp, built here) of each binary's run, summarized per
# chunk by bench/chunk_summary.py (dense vs TurboQuant chunks after the conversion, per kernel).
# ENGINE_ARGS: bench_engine decode rows run by both binaries after the rounds, ';' between
# argument sets (ENGINE=0: none).
# TESTS="binary filter": a test binary (.xz accepted) run first with GTEST_FILTER=filter.
# OLD_ENV / NEW_ENV: environment assignments ("A=1 B=2") for every run of that side, so one
# binary can be its own baseline (OLD_BENCH = NEW_BENCH). The traces record the runtime calls too
# (bench/api_summary.py: host time per chunk and call).
# Shared libraries and tqserve (make-model) come from .gpu/e2e.tar.xz (ONLY=e2e-bin
# bench/pack_cuda_archives.sh BUILD).
# Carry the binaries, ".gpu/e2e.tar.xz" and ".gpu/lib".
set -o pipefail
W=/tmp/mab
# shellcheck source=bench/device_common.sh
. "$(dirname "$0")/device_common.sh"
M=${MODEL_DIR:-/tmp/qwen3-8b-random}
mkdir -p "$W/e2e" "$W/traces"
tar -C "$W/e2e" -xJf .gpu/e2e.tar.xz || { echo "no .gpu/e2e.tar.xz"; exit 1; }
LD_LIBRARY_PATH=$W/e2e/lib:$LD_LIBRARY_PATH
t0=$SECONDS
if [ -n "${TESTS:-}" ]; then
  read -r tb tf <<< "$TESTS"
  tb=$(unpack "$tb")
  mkdir -p /work && ln -sfn "$R" /work/main
  GTEST_FILTER="$tf" timeout 240 "$tb" > "$OUT/tests.log" 2>&1
  echo "tests rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|SKIPPED \]" "$OUT/tests.log" | head -20
fi
OB=$(unpack "$OLD_BENCH"); NB=$(unpack "$NEW_BENCH")
[ -f "$M/config.json" ] || "$W/e2e/tqserve" make-model --like qwen3-8b --random --out "$M" --force \
  --tokenizer-from models/micro-qwen3 > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; exit 1; }
ARGS="--model $M --device cuda --mid-prefill --context ${CONTEXT:-32768} --convert-at ${AT:-16384} --chunk 4096"
for r in $(seq "${ROUNDS:-2}"); do
  for v in old new; do
    b=$OB; [ $v = new ] && b=$NB
    # shellcheck disable=SC2086  # ARGS are words
    e=${OLD_ENV:-}; [ $v = new ] && e=${NEW_ENV:-}
    # shellcheck disable=SC2086
    timeout 120 env $e "$b" $ARGS 2> "$W/$v-$r.err" | grep "^| cuda" | sed "s/^/$v round $r /"
  done
done | tee "$OUT/ab_midprefill.txt"
echo "rounds [$((SECONDS - t0)) s]"
# Engine decode rows of both binaries (ENGINE_ARGS; ENGINE=0 skips them).
if [ "${ENGINE:-1}" = 1 ]; then
  IFS=';' read -ra eargs <<< "${ENGINE_ARGS:---batch 1 --context 32768 --kv dense,turboquant --tokens 64 --chunk 4096}"
  for ea in "${eargs[@]}"; do
    for v in old new; do
      b=$OB; [ $v = new ] && b=$NB
      # shellcheck disable=SC2086
      e=${OLD_ENV:-}; [ $v = new ] && e=${NEW_ENV:-}
      # shellcheck disable=SC2086
      timeout 150 env $e "$b" --model "$M" --device cuda $ea 2> "$W/engine-$v.err" | grep "^| cuda" | sed "s/^/$v /"
    done
  done | tee "$OUT/ab_engine.txt"
  echo "engine [$((SECONDS - t0)) s]"
fi
if [ "${TRACE:-1}" = 1 ]; then
  CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
  CUPTI=$(find "$CUDA_HOME" /usr/local -name libcupti.so 2>/dev/null | head -1)
  g++ -O2 -shared -fPIC -I"$CUDA_HOME/include" bench/cupti_trace.cpp -L"$(dirname "$CUPTI")" -lcupti \
    -o "$W/libcupti_trace.so" || { echo "cupti_trace did not build"; exit 1; }
  LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$CUPTI")
  for v in old new; do
    b=$OB; [ $v = new ] && b=$NB
    # shellcheck disable=SC2086
    e=${OLD_ENV:-}; [ $v = new ] && e=${NEW_ENV:-}
    # shellcheck disable=SC2086
    CUDA_INJECTION64_PATH=$W/libcupti_trace.so TQ_TRACE_OUT="$W/traces/$v.csv" \
      TQ_TRACE_API="$W/traces/$v.api.csv" timeout 120 env $e "$b" $ARGS > "$W/traces/$v.log" 2>&1
    python3 bench/chunk_summary.py "$W/traces/$v.csv" --chunks $(( ${CONTEXT:-32768} / 4096 )) \
      --from $(( ${AT:-16384} / 4096 )) > "$W/traces/$v.md" 2>&1
    python3 bench/api_summary.py "$W/traces/$v.api.csv" --chunks $(( ${CONTEXT:-32768} / 4096 )) \
      --from $(( ${AT:-16384} / 4096 )) >> "$W/traces/$v.md" 2>&1
  done
  tar -C "$W/traces" -czf "$OUT/traces.tgz" .
  echo "traces [$((SECONDS - t0)) s]"
  for v in old new; do echo "== $v"; cat "$W/traces/$v.md"; done
fi
[ -f "$OUT/ab_engine.txt" ] && { echo "== engine (device | kv | batch | context | prefill tok/s | convert s | ms/step | KV MiB | ...)"; cat "$OUT/ab_engine.txt"; }
# NCU="regex skip; ..": Nsight Compute details (full set) of one launch each, new binary (skip =
# matching launches passed over first; e.g. "encode_kernel 300;prefill_wgmma 470").
if [ -n "${NCU:-}" ]; then
  NCUB=$(command -v ncu || find / -name ncu -type f 2>/dev/null | head -1)
  mkdir -p "$W/ncu"
  IFS=';' read -ra ks <<< "$NCU"
  n=0
  for k in "${ks[@]}"; do
    read -r kr ksk <<< "$k"
    n=$((n + 1)); tag="$n-$kr-$ksk"
    # shellcheck disable=SC2086
    timeout ${NCU_TIMEOUT:-240} "$NCUB" --clock-control none -k "regex:$kr" --launch-skip "$ksk" -c 1 --set full \
      --import-source no -o "$W/prof" -f "$NB" $ARGS > "$W/ncu/$tag.log" 2>&1
    "$NCUB" --import "$W/prof.ncu-rep" --page details > "$W/ncu/$tag.txt" 2>&1
    "$NCUB" --import "$W/prof.ncu-rep" --page raw --csv > "$W/ncu/$tag.raw.csv" 2>&1
    echo "== ncu $tag [$((SECONDS - t0)) s]"
    grep -E "prefill_wgmma_kernel|encode_kernel|Duration|Registers Per|Issued Ipc|Executed Instructions  |No Eligible|Achieved Occ|DRAM Throughput|Memory Throughput|Compute \\(SM\\) Th|Theoretical Occ|L2 Hit|Warp Cycles Per Issued" "$W/ncu/$tag.txt" | head -24
  done
  tar -C "$W/ncu" -czf "$OUT/ncu.tgz" .
fi
echo "== mid-prefill (device | context | at | dense s | TQ s | conversion s | % | slices | dense MiB | TQ MiB | dense suffix s | TQ suffix s | TQ suffix less conversion vs dense)"
cat "$OUT/ab_midprefill.txt"
