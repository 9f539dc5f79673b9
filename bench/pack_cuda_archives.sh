#!/usr/bin/env bash
# Packs the device tool's archives from a CUDA build made here (docs/gpu.md, "Everything in one
# call"): .gpu/tests.tar.xz (unit_backend_cuda, golden_cuda, bench_cuda_attention, bench_cuda_prefill
# and the tiny-qwen3 fixture) and .gpu/e2e.tar.xz (tqserve, bench_engine and the shared libraries they need that the
# device image lacks), plus .gpu/lib (libfmt). Usage: bash bench/pack_cuda_archives.sh [BUILD_DIR]
# (default build-cuda; it must have built tqserve bench_engine unit_backend_cuda golden_cuda
# bench_cuda_attention bench_cuda_prefill). SHARED (default ../shared) is where the fixtures are.
# ONLY=e2e packs .gpu/e2e.tar.xz alone from tqserve, with tiny-qwen3's model files in
# models/tiny-qwen3 (no reference dumps): what bench/run_cuda_validate.sh needs. ONLY=e2e-bin packs
# tqserve and its libraries alone (~11 MB): what bench/run_cuda_midprefill_ab.sh needs (make-model).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-cuda}
SHARED=${SHARED:-../shared}
ONLY=${ONLY:-}
E2E_ONLY=false
case "$ONLY" in
  "") ;;
  e2e | e2e-bin) E2E_ONLY=true ;;
  *) echo "ONLY must be e2e or e2e-bin (got '$ONLY')" >&2; exit 2 ;;
esac
need="tqserve bench/bench_engine tests/unit_backend_cuda tests/golden_cuda bench/bench_cuda_attention bench/bench_cuda_prefill"
$E2E_ONLY && need=tqserve
for f in $need; do
  [ -x "$B/$f" ] || { echo "missing $B/$f: build it first (docs/gpu.md)" >&2; exit 1; }
done
mkdir -p .gpu/lib
grep -qs '^/.gpu/$' .git/info/exclude || echo '/.gpu/' >> .git/info/exclude
cp -L "$(ldd "$B/tqserve" | awk '/libfmt/{print $3}')" .gpu/lib/
T=$(mktemp -d)
mkdir -p "$T/tests/bin" "$T/tests/shared/models" "$T/e2e/lib"
if [ "$ONLY" = e2e ]; then
  mkdir -p "$T/e2e/models/tiny-qwen3"
  find "$SHARED/models/tiny-qwen3" -maxdepth 1 -type f -exec cp {} "$T/e2e/models/tiny-qwen3/" \;
elif ! $E2E_ONLY; then
for f in tests/unit_backend_cuda tests/golden_cuda bench/bench_cuda_attention bench/bench_cuda_prefill; do
  strip -o "$T/tests/bin/$(basename $f)" "$B/$f"
done
# tiny-qwen3 whole: golden_cuda compares against its reference dumps.
cp -r "$SHARED/models/tiny-qwen3" "$T/tests/shared/models/"
chmod -R u+w "$T/tests/shared"
(cd "$T/tests" && XZ_OPT="-9 -T2" tar -cJf "$OLDPWD/.gpu/tests.tar.xz" .)
strip -o "$T/e2e/bench_engine" "$B/bench/bench_engine"
fi
strip -o "$T/e2e/tqserve" "$B/tqserve"
bins=("$B/tqserve")
$E2E_ONLY || bins+=("$B/bench/bench_engine")
for f in $(ldd "${bins[@]}" | awk '/=>/{print $3}' | sort -u |
           grep -vE 'libc.so|libm.so|libstdc|libgcc_s|librt|libpthread|libdl|cublasLt'); do
  cp -L "$f" "$T/e2e/lib/"
done
(cd "$T/e2e" && XZ_OPT="-9 -T2" tar -cJf "$OLDPWD/.gpu/e2e.tar.xz" .)
rm -rf "$T"
ls -la .gpu/*.tar.xz .gpu/lib
