#!/usr/bin/env bash
# One device-tool call: end-to-end Qwen3-8B-shaped numbers on the GPU. Writes the random-weight
# model with `tqserve make-model` on the device's disk, then `tqserve generate --device cuda`
# (batch 1, greedy, --prefill-chunk 4096): prefill tokens/s at 4K and at 32K, the 4K chunk after
# 32K of context (prefill time of a 36K prompt minus that of the 32K one), decode tokens/s short,
# after 4K and after 32K, with dense KV and then with `--kv turboquant` (those runs may fail on
# their own without stopping the dense rows). Binaries and libraries come in .gpu/e2e.tar.xz
# (docs/gpu.md). Logs under $OUT; the summary table is printed last.
set -o pipefail
R=$PWD
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
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
run() {  # name, prompt length, new tokens, time limit (s), extra generate flags...
  local name=$1 n=$2 m=$3 lim=$4 t0=$SECONDS
  shift 4
  # The whole call must end inside the device tool's 600 s: later rows get what is left.
  [ $((575 - SECONDS)) -lt "$lim" ] && lim=$((575 - SECONDS))
  if [ "$lim" -lt 20 ]; then echo "$name skipped (no device time left)" >> "$OUT/runs.log"; return 0; fi
  timeout "$lim" $T generate --model "$M" --device cuda --prompt-ids "$(ids "$n")" --max-tokens "$m" \
    --ignore-eos --prefill-chunk 4096 --json "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  local rc=$?
  echo "$name rc=$rc [$((SECONDS - t0)) s incl. load]" >> "$OUT/runs.log"
  [ $rc -eq 0 ] || tail -3 "$OUT/$name.err" >> "$OUT/runs.log"
  return 0  # a failed row is reported in the table, the next rows still run
}
run gen_short 128 128 90
run gen_4k 4096 128 90
run gen_32k 32768 64 150
run gen_36k 36864 8 150
run tq_short 128 128 90 --kv turboquant
run tq_4k 4096 128 90 --kv turboquant
run tq_32k 32768 64 150 --kv turboquant
run tq_36k 36864 8 150 --kv turboquant
nvidia-smi --query-gpu=name,memory.used --format=csv
cat "$OUT/runs.log"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except Exception:
        return None
def fmt(j, key, f="%.0f"):
    return f % j[key] if j and key in j else "failed"
print("| row | prompt | new | prefill tok/s | decode tok/s | KV bytes |")
print("|---|---|---|---|---|---|")
for kv, rows in (("dense", ("gen_short", "gen_4k", "gen_32k", "gen_36k")),
                 ("turboquant", ("tq_short", "tq_4k", "tq_32k", "tq_36k"))):
    for r in rows:
        j = load(r)
        if j and "error" in j:
            j = None  # the error is in runs.log and the row's .json / .err
        print("| %s %s | %s | %s | %s | %s | %s |" % (kv, r, j.get("prompt_tokens", "-") if j else "-",
              j.get("completion_tokens", "-") if j else "-", fmt(j, "prefill_tokens_per_s"),
              fmt(j, "decode_tokens_per_s", "%.1f"), fmt(j, "kv_bytes", "%d")))
for kv, short, long in (("dense", "gen_32k", "gen_36k"), ("turboquant", "tq_32k", "tq_36k")):
    a, b = load(short), load(long)
    if a and b and a.get("prefill_tokens_per_s") and b.get("prefill_tokens_per_s"):
        dt = b["prompt_tokens"] / b["prefill_tokens_per_s"] - a["prompt_tokens"] / a["prefill_tokens_per_s"]
        n = b["prompt_tokens"] - a["prompt_tokens"]
        print("%s: prefill of the 4K chunk after 32K of context: %s" % (kv, "%.0f tok/s (%d tokens in %.3f s)" % (n / dt, n, dt) if dt > 0 else "not measurable"))
PY
