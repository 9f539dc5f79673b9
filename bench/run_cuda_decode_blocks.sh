#!/usr/bin/env bash
# One device-tool call: the batch-1 32K TurboQuant decode's per-block timelines (TQ_DECODE_STAMPS=1
# with TQ_DECODE_STAMPS_CSV) from ROUNDS separate bench_cuda_attention processes, then with 0 and 5
# early stages, summarised by bench/decode_blocks.py: are the blocks whose loops end last the same
# ones every launch? ATTN: the bench binary, a path or a .xz (bench/pack_cuda_archives.sh strips it;
# e.g. `xz -c bench_cuda_attention > .gpu/attn.xz`). Carry ATTN's file and ".gpu/lib".
set -o pipefail
# shellcheck disable=SC2034  # device_common.sh uses W
W=/tmp/blocks
# shellcheck source=bench/device_common.sh
. "$(dirname "$0")/device_common.sh"
A=$(unpack "${ATTN:?set ATTN to the bench_cuda_attention binary}")
N_SPLIT=${N_SPLIT:-16}  # the plan's splits at batch 1, 32K, 8 kv heads on 132 SMs
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
files=()
for r in $(seq "${ROUNDS:-3}"); do
  TQ_DECODE_STAMPS=1 TQ_DECODE_STAMPS_CSV=$OUT/round$r.csv timeout 60 "$A" --decode-only --batch 1 \
    --ctx 32768 > "$OUT/round$r.txt" 2>&1
  grep -E "^tq4" "$OUT/round$r.txt" | sed "s/^/round $r  /"
  files+=("$OUT/round$r.csv")
done
python3 bench/decode_blocks.py "$N_SPLIT" "${files[@]}"
for e in 0 5; do
  TQ_DECODE_EARLY_STAGES=$e TQ_DECODE_STAMPS=1 TQ_DECODE_STAMPS_CSV=$OUT/early$e.csv timeout 60 "$A" \
    --decode-only --batch 1 --ctx 32768 > "$OUT/early$e.txt" 2>&1
  grep -E "^tq4" "$OUT/early$e.txt" | sed "s/^/early stages $e  /"
  python3 bench/decode_blocks.py "$N_SPLIT" "$OUT/early$e.csv" | sed "s/^/early stages $e  /"
done
