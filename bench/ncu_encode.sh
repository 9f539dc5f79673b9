#!/usr/bin/env bash
# Device-tool call: Nsight Compute (full set) of the bulk encoder's launch in bench_cuda_tq_encode
# rows 1 (4K chunk, codes only) and 3 (8K slice from a bf16 store); details and raw CSV under
# $OUT, key lines printed. Carry [".gpu/enc", ".gpu/lib"] (bench/run_cuda_encode.sh's binaries).
R=$PWD; CL=$(find /usr/local /opt -name libcublasLt.so.13 2>/dev/null | head -1)
LD_LIBRARY_PATH=$R/.gpu/lib:$(dirname "$CL")
export LD_LIBRARY_PATH
NCUB=$(command -v ncu || find / -name ncu -type f 2>/dev/null | head -1)
mkdir -p $OUT
# --row N runs one row; --launch-skip 1 profiles its second launch (warm)
for row in 1 3; do
  ks=$row; kr=encode_rows_kernel
  timeout 200 $NCUB --clock-control none -k "regex:$kr" --launch-skip $ks -c 1 --set full --import-source no -o /tmp/p$ks -f .gpu/enc/bench_cuda_tq_encode --row $row > /tmp/ncu$ks.log 2>&1
  $NCUB --import /tmp/p$ks.ncu-rep --page details > $OUT/ncu$ks.txt 2>&1
  $NCUB --import /tmp/p$ks.ncu-rep --page raw --csv > $OUT/ncu$ks.raw.csv 2>&1
  grep -E "encode_rows|Duration|Registers Per|Issued Ipc|Executed Instructions  |No Eligible|Achieved Occ|DRAM Throughput|Memory Throughput|Compute \(SM\) Th|Theoretical Occ|Warp Cycles Per Issued|Block Limit|Grid Size|One or More|Issue Slots|Shared.*Bank|L1/TEX Hit|Mem Busy|Max Bandwidth|stall" $OUT/ncu$ks.txt | head -40
done
