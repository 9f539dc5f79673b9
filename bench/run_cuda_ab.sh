#!/usr/bin/env bash
# One device-tool call: a new build against the one it replaces, in the same call (the method of
# bench/results: every change is timed next to its baseline, alternating, so clock and thermal
# drift hit both alike).
# - Kernels, when OLD_ATTN and NEW_ATTN are set: `bench_cuda_attention --decode-only $ATTN_ARGS`
#   of each, ROUNDS rounds (default 2); the rows printed as "old"/"new" per round.
# - Engine, when OLD_TQSERVE and NEW_TQSERVE are set: `tqserve generate --device cuda` on the
#   Qwen3-8B-shaped random model (written by the new tqserve's make-model), ROWS rows per binary
#   and round: decode and prefill tok/s and a hash of the greedy ids (equal ids, equal hashes).
#   ROWS: entries "name:prompt_tokens:new_tokens:extra flags" separated by ';' (default: TQ4 and
#   dense at 32K, 64 tokens, and at 128 tokens, 128 tokens).
# Binaries may be given as .xz files (unpacked here). tqserve's shared libraries come from
# .gpu/e2e.tar.xz (bench/pack_cuda_archives.sh), which also holds a tqserve: NEW_TQSERVE=e2e takes
# that one. Carry the binaries, ".gpu/e2e.tar.xz" when the engine rows run, and ".gpu/lib".
# Example: OLD_ATTN=.gpu/old.xz NEW_ATTN=.gpu/new.xz ATTN_ARGS="--batch 1 --ctx 32768" \
#   bash bench/run_cuda_ab.sh
set -o pipefail
W=/tmp/ab
# shellcheck source=bench/device_common.sh
. "$(dirname "$0")/device_common.sh"
ROUNDS=${ROUNDS:-2}
if [ -n "${OLD_ATTN:-}" ] && [ -n "${NEW_ATTN:-}" ]; then
  OA=$(unpack "$OLD_ATTN"); NA=$(unpack "$NEW_ATTN")
  for r in $(seq "$ROUNDS"); do
    for v in old new; do
      b=$OA; [ $v = new ] && b=$NA
      # shellcheck disable=SC2086  # ATTN_ARGS are words
      timeout 120 "$b" --decode-only ${ATTN_ARGS:-} 2>&1 | grep -E "^(bf16|tq4)" | sed "s/^/$v round $r  /"
    done
  done | tee "$OUT/ab_attention.txt"
fi
if [ -n "${OLD_TQSERVE:-}" ] && [ -n "${NEW_TQSERVE:-}" ]; then
  mkdir -p "$W/e2e"
  if ! tar -C "$W/e2e" -xJf .gpu/e2e.tar.xz; then echo "no .gpu/e2e.tar.xz"; exit 1; fi
  export LD_LIBRARY_PATH=$W/e2e/lib:$LD_LIBRARY_PATH
  OT=$(unpack "$OLD_TQSERVE")
  NT=$W/e2e/tqserve; [ "$NEW_TQSERVE" != e2e ] && NT=$(unpack "$NEW_TQSERVE")
  M=${MODEL_DIR:-/tmp/qwen3-8b-random}
  [ -f "$M/config.json" ] || "$NT" make-model --like qwen3-8b --random --out "$M" --force \
    --tokenizer-from models/micro-qwen3 > "$OUT/make_model.log" 2>&1 || { cat "$OUT/make_model.log"; exit 1; }
  ids() { python3 -c "import sys; print(','.join(str(10 + (i * 7919) % 90) for i in range(int(sys.argv[1]))))" "$1"; }
  ROWS=${ROWS:-"tq32k:32768:64:--kv turboquant;dense32k:32768:64:;tqshort:128:128:--kv turboquant;denseshort:128:128:"}
  IFS=';' read -ra rows <<< "$ROWS"
  for r in $(seq "$ROUNDS"); do
    for v in old new; do
      t=$OT; [ $v = new ] && t=$NT
      for row in "${rows[@]}"; do
        IFS=':' read -r name n m flags <<< "$row"
        j="$W/$v-$name-$r.json"
        # shellcheck disable=SC2086  # flags are words
        timeout 150 "$t" generate --model "$M" --device cuda --prompt-ids "$(ids "$n")" --max-tokens "$m" \
          --ignore-eos --prefill-chunk 4096 --json $flags > "$j" 2> "$j.err"
        python3 - "$j" "$v round $r  $name" <<'PY'
import hashlib, json, sys
try:
    j = json.load(open(sys.argv[1]))
    print("%-28s decode %7.1f tok/s  prefill %8.0f tok/s  ids %s" % (sys.argv[2],
          j["decode_tokens_per_s"], j["prefill_tokens_per_s"],
          hashlib.md5(str(j.get("ids")).encode()).hexdigest()[:12]))
except Exception as e:
    print("%-28s failed (%s)" % (sys.argv[2], e))
PY
      done
    done
  done | tee "$OUT/ab_engine.txt"
fi
