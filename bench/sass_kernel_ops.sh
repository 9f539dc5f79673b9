#!/usr/bin/env bash
# On the device (it has cuobjdump; this machine does not): the SASS of the kernels of BIN whose
# mangled names contain PATTERN (e.g. "prefill_wgmma_kernelILi3E"), written to $OUT/sass_TAG.txt,
# their register / shared-memory use (cuobjdump -res-usage) after it, and a count of the
# instruction kinds that size a softmax or decode loop.
# Usage: bash bench/sass_kernel_ops.sh BIN TAG PATTERN
set -o pipefail
[ $# -eq 3 ] || { echo "usage: sass_kernel_ops.sh BIN TAG PATTERN" >&2; exit 2; }
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CO=$(command -v cuobjdump || find /usr/local -name cuobjdump -type f 2>/dev/null | head -1)
[ -n "$CO" ] || { echo "no cuobjdump" >&2; exit 1; }
"$CO" -sass "$1" 2>/dev/null |
  awk -v K="$3" '/Function :/ { f = index($0, K) > 0 } f' > "$OUT/sass_$2.txt"
[ -s "$OUT/sass_$2.txt" ] || { echo "no kernel matching $3 in $1" >&2; exit 1; }
"$CO" -res-usage "$1" 2>/dev/null | grep -A1 -F "$3" >> "$OUT/sass_$2.txt"
printf '%s:' "$2"
for op in MUFU HGMMA FMNMX FADD FMUL FFMA F2FP HADD2 HMUL2 PRMT LOP3 LDS STS SHFL; do
  printf ' %s %s' "$op" "$(grep -cE "[[:space:]]$op(\.|[[:space:]])" "$OUT/sass_$2.txt")"
done
echo
