#!/usr/bin/env python3
# The per-layer critical path of a batch-1 decode, from CUPTI traces (bench/cupti_trace.cpp: CSV
# start_ns,end_ns,grid_x,name). With PDL the kernels overlap, so their durations do not add up;
# here each segment runs from one kernel's end to the next one's: qk (q/k/v GEMV end -> q/k norm
# + RoPE + append end), att (-> the attention's last kernel end: decode + merge, or the TurboQuant
# decode), o, gu (gate/up), dn (down), qkv (the next layer's q/k/v GEMV). Prints the median of
# each over all complete layers, and their sum (the layer's period).
# Usage: step_segments.py TRACE.csv [TRACE.csv ..]
import csv
import statistics
import sys

KERNELS = ["gemv_staged_kernel", "qk_norm_rope_kernel", "decode_kernel", "merge_kernel",
           "tq128_kernel", "record_encode_kernel", "embedding_kernel", "logits_top_kernel",
           "rms_norm_kernel"]
# The TurboQuant record of the step's token is encoded beside the attention (deferred record).
ATTENTION = ("decode_kernel", "merge_kernel", "tq128_kernel", "record_encode_kernel")
SEGMENTS = ["qk", "att", "o", "gu", "dn", "qkv"]


def short_name(mangled):
    for k in KERNELS:
        if k in mangled:
            return k
    return mangled[:20]


def layer_segments(path):
    with open(path) as f:
        rows = list(csv.reader(f))[1:]
    ev = sorted((int(r[0]), int(r[1]), short_name(r[3])) for r in rows)
    segs = {k: [] for k in SEGMENTS}
    for i, (_, end, name) in enumerate(ev):
        if name != "qk_norm_rope_kernel" or i == 0 or ev[i - 1][2] != "gemv_staged_kernel":
            continue
        j, att_end = i + 1, 0
        while j < len(ev) and ev[j][2] in ATTENTION:
            att_end = max(att_end, ev[j][1])
            j += 1
        if att_end == 0 or j + 3 >= len(ev):
            continue
        o, gu, dn, qkv = ev[j:j + 4]
        if any(k[2] != "gemv_staged_kernel" for k in (o, gu, dn, qkv)):
            continue  # the last layer: the LM head follows
        ends = [ev[i - 1][1], end, att_end, o[1], gu[1], dn[1], qkv[1]]
        for k, a, b in zip(SEGMENTS, ends, ends[1:]):
            segs[k].append((b - a) / 1000.0)
    return segs


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: step_segments.py TRACE.csv [TRACE.csv ..]")
    for path in sys.argv[1:]:
        segs = layer_segments(path)
        n = len(segs["qk"])
        if n == 0:
            print(f"{path}: no complete layers")
            continue
        med = {k: statistics.median(v) for k, v in segs.items()}
        parts = "  ".join(f"{k}={med[k]:.2f}" for k in SEGMENTS)
        print(f"{path.split('/')[-1]} {n} layers (us): {parts}  sum {sum(med.values()):.1f}")


if __name__ == "__main__":
    main()
