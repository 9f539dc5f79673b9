#!/usr/bin/env bash
# One device-tool call: end-to-end Qwen3-8B-shaped numbers on the GPU. Writes the random-weight
# model with `tqserve make-model` on the device's disk, then `tqserve generate --device cuda`:
# prefill tokens/s at 4K, decode tokens/s at batch 1 after 4K, and prefill + decode at 32K
# (dense KV: TurboQuant KV is not on the GPU yet). Binaries and libraries come in .gpu/bin and
# .gpu/lib (docs/gpu.md). At most 8 files under $OUT; a summary is printed last.
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
OUT=${OUT:-/tmp/out}
M=${MODEL_DIR:-/tmp/qwen3-8b-random}
mkdir -p "$OUT"
# tqserve and its libraries travel as one archive (.gpu/e2e.tar.xz: tqserve + lib/, docs/gpu.md).
mkdir -p /tmp/e2e && tar -C /tmp/e2e -xJf .gpu/e2e.tar.xz
export LD_LIBRARY_PATH=/tmp/e2e/lib:$LD_LIBRARY_PATH
T=/tmp/e2e/tqserve
$T make-model --like qwen3-8b --random --out "$M" --force --tokenizer-from models/micro-qwen3 \
  > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; exit 1; }
cat "$OUT/make_model.log"
ids() { python3 -c "import sys; print(','.join(str(10 + (i * 7919) % 90) for i in range(int(sys.argv[1]))))" "$1"; }
run() {  # name, prompt length, new tokens, time limit (s)
  local t0=$SECONDS
  timeout "$4" $T generate --model "$M" --device cuda --prompt-ids "$(ids "$2")" --max-tokens "$3" --ignore-eos \
    --json > "$OUT/$1.json" 2> "$OUT/$1.err"
  echo "$1 rc=$? $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('prompt', j['prompt_tokens'], 'prefill tok/s %.0f' % j['prefill_tokens_per_s'], 'decode tok/s %.1f' % j['decode_tokens_per_s'], 'kv_bytes', j['kv_bytes'])" "$OUT/$1.json" 2>&1 | tail -1) [$((SECONDS - t0)) s incl. load]"
}
run gen_short 128 128 150
run gen_4k 4096 128 150
run gen_32k 32768 64 300
nvidia-smi --query-gpu=name,memory.used --format=csv
