#!/usr/bin/env bash
# Sourced by the device-tool A/B scripts (run_cuda_ab.sh, run_cuda_midprefill_ab.sh,
# run_cuda_prefill_ab.sh) after they set W, their scratch folder: R (the repository root),
# OUT (default /tmp/out), CL (cuBLASLt, from the device's CUDA install), LD_LIBRARY_PATH with
# .gpu/lib (libfmt) and cuBLASLt, and unpack.
R=$PWD
OUT=${OUT:-/tmp/out}
CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
mkdir -p "$OUT" "$W"
# A binary given as path or path.xz -> an executable path (an .xz is unpacked into $W each time:
# a warm device keeps /tmp between calls, and a rebuilt binary keeps its name).
unpack() {
  case "$1" in
    *.xz) local d
          d="$W/$(basename "$1" .xz)"
          xz -dc "$1" > "$d" && chmod +x "$d" && echo "$d" ;;
    *) echo "$1" ;;
  esac
}
