#!/usr/bin/env python3
"""Per-block timelines of the TurboQuant decode kernel (TQ_DECODE_STAMPS_CSV files, one section per
stamp report): when each split block's loop ends, how long it ran, and whether the same blocks are
late in every launch (then a static re-split could balance them) or not (then only a dynamic split
would). Usage: decode_blocks.py N_SPLIT FILE.csv [FILE.csv ...]; a file's first section is taken
(bench_cuda_attention reports the no-tail launch first)."""
import statistics as st
import sys

# Columns: block, t0 .. t11 (ns from the launch's release): t0 start, t3 queries in registers,
# t4 first stage arrived, t5 loop done (tq128_merge.cuh, "Phases stamped by the probe").
START, QUERIES, FIRST, LOOP = 1, 4, 5, 6


def first_section(path):
    rows, n = [], 0
    for line in open(path):
        if line.startswith("block"):
            n += 1
            if n > 1:
                break
            continue
        rows.append([float(x) for x in line.split(",")])
    return rows


def corr(a, b):
    ma, mb = st.mean(a), st.mean(b)
    num = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    den = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    return num / den if den else 0.0


def ranks(v):
    r = [0] * len(v)
    for k, i in enumerate(sorted(range(len(v)), key=lambda i: v[i])):
        r[i] = k
    return r


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    n_split = int(sys.argv[1])
    launches = [first_section(p) for p in sys.argv[2:]]
    for i, s in enumerate(launches):
        end = [r[LOOP] for r in s]
        dur = [r[LOOP] - r[QUERIES] for r in s]
        print("launch %d (%d blocks): loop end min/median/max %.0f/%.0f/%.0f ns; loop %.0f/%.0f/%.0f;"
              " corr(loop, start) %.2f, corr(loop, split) %.2f, corr(loop, first-stage wait) %.2f" % (
                  i, len(s), min(end), st.median(end), max(end), min(dur), st.median(dur), max(dur),
                  corr(dur, [r[START] for r in s]), corr(dur, [b % n_split for b in range(len(s))]),
                  corr(dur, [r[FIRST] - r[QUERIES] for r in s])))
        late = sorted(range(len(s)), key=lambda b: -end[b])[:8]
        print("  latest 8 (block split/head: loop end):",
              " ".join("%d %d/%d: %.0f" % (b, b % n_split, b // n_split, end[b]) for b in late))
        print("  mean loop end by split:",
              " ".join("%.0f" % st.mean(end[k::n_split]) for k in range(n_split)))
    for i in range(len(launches) - 1):
        a, b = launches[i], launches[i + 1]
        if len(a) == len(b):
            print("rank correlation of loop ends, launch %d vs %d: %.2f" % (
                i, i + 1, corr(ranks([r[LOOP] for r in a]), ranks([r[LOOP] for r in b]))))


if __name__ == "__main__":
    main()
