#!/usr/bin/env bash
# Experiment builds of the prefill wgmma kernel without a build directory each: prefill_wgmma.cu
# compiled again with extra flags (its compile command from BUILD's ninja, the flags appended),
# swapped into a copy of libtq_backend_cuda.a, and TARGETS relinked by BUILD's own link commands.
# Each variant lands in OUT/TAG/ (one binary per target, named as the target's file). A full build
# directory per flag set recompiles every CUDA file (~3.5 min here); this recompiles one.
# Usage: bash bench/build_wgmma_variants.sh BUILD OUT "TAG=FLAGS[,FLAGS] ..."
#   e.g. bash bench/build_wgmma_variants.sh build .gpu/v "skip=-DTQ_WG_DECODE_SKIP=1 probe=-DTQ_WG_WAIT_PROBE=1"
# TARGETS (default "bench/bench_cuda_prefill"): ninja targets of BUILD that link tq_backend_cuda.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: build_wgmma_variants.sh BUILD OUT \"TAG=FLAGS ...\"" >&2; exit 2; }
B=$(cd "$1" && pwd)
mkdir -p "$2"
O=$(cd "$2" && pwd)
read -ra targets <<< "${TARGETS:-bench/bench_cuda_prefill}"
ninja -C "$B" "${targets[@]}" > /dev/null
obj=CMakeFiles/tq_backend_cuda.dir/src/backend/cuda/prefill_wgmma.cu.o
cmds=$(ninja -C "$B" -t commands "${targets[0]}")
cc=$(grep -m1 -F -- "-MF $obj.d " <<< "$cmds") || { echo "no compile command for $obj in $B" >&2; exit 1; }
# The object to the variant's folder, no dependency file (BUILD's own stays as it is).
cc=$(sed -E "s# -MD -MT [^ ]+ -MF [^ ]+##; s# -o $obj( |\$)# -o @OBJ@\1#" <<< "$cc")
[[ $cc == *@OBJ@* ]] || { echo "no -o $obj in its compile command" >&2; exit 1; }
for v in $3; do
  tag=${v%%=*} flags=${v#*=}
  if [ -z "$tag" ] || [ "$tag" = "$v" ]; then echo "bad variant '$v' (TAG=FLAGS)" >&2; exit 2; fi
  W=$O/$tag
  mkdir -p "$W"
  (cd "$B" && eval "${cc//@OBJ@/$W/prefill_wgmma.cu.o} ${flags//,/ }")
  cp "$B/libtq_backend_cuda.a" "$W/libtq_backend_cuda.a"
  ar r "$W/libtq_backend_cuda.a" "$W/prefill_wgmma.cu.o"
  for t in "${targets[@]}"; do
    link=$(ninja -C "$B" -t commands "$t")
    link=${link##*$'\n'}  # the last command: the target's link
    link=$(sed -E "s#(^| )libtq_backend_cuda\.a( |$)#\1$W/libtq_backend_cuda.a\2#g; s# -o $t( |\$)# -o $W/$(basename "$t")\1#" <<< "$link")
    (cd "$B" && eval "$link")
  done
  rm -f "$W/libtq_backend_cuda.a" "$W/prefill_wgmma.cu.o"
  echo "$tag: ${targets[*]} in $W"
done
