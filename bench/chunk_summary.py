#!/usr/bin/env python3
# Where a mid-prefill run's extra time goes, from a CUPTI trace of `bench_engine --mid-prefill`
# (bench/cupti_trace.cpp CSV; read by step_summary.read): the run prefills the same prompt twice,
# dense then with the forced conversion, each as N chunks that start at an embedding launch. For
# the last 2N chunks: each chunk's wall time, GPU busy and idle (dense vs TurboQuant side by
# side), then the kernels of the chunks from --from on (the part after the conversion point) summed
# per name for both runs, largest difference first. Usage:
#   chunk_summary.py TRACE.csv --chunks 8 [--from 4]
import sys
from collections import defaultdict

from step_summary import busy_us, read


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def segment_stats(rows, a, b):
    """(wall_us, busy_us, {name: us}) of rows[a:b] (b may be len(rows))."""
    end = max(r[1] for r in rows[a:b])
    busy = busy_us(rows[a:b])
    per = defaultdict(float)
    for _, _, us, name, _ in rows[a:b]:
        per[name] += us
    return end - rows[a][0], busy, per


def main():
    path = sys.argv[1]
    n, first = arg("--chunks", 8), arg("--from", 0)
    rows = read(path)
    if not rows or rows[0][0] is None:
        print(f"{path}: no CUPTI timeline")
        return
    starts = [i for i, r in enumerate(rows) if r[3].startswith("embedding")]
    if len(starts) < 2 * n:
        print(f"{path}: {len(starts)} chunks found, need {2 * n}")
        return
    starts = starts[-2 * n:]
    bounds = list(zip(starts, starts[1:] + [len(rows)]))
    stats = [segment_stats(rows, a, b) for a, b in bounds]
    print("| chunk | dense wall ms | dense idle ms | TQ wall ms | TQ idle ms | TQ / dense |")
    print("|---|---|---|---|---|---|")
    tot = [0.0, 0.0]
    for i in range(n):
        (dw, db, _), (tw, tb, _) = stats[i], stats[n + i]
        if i >= first:
            tot[0] += dw
            tot[1] += tw
        print(f"| {i} | {dw / 1e3:.2f} | {(dw - db) / 1e3:.2f} | {tw / 1e3:.2f} | {(tw - tb) / 1e3:.2f} "
              f"| {tw / dw:.3f} |")
    print(f"\nChunks {first}..{n - 1}: dense {tot[0] / 1e3:.1f} ms, TurboQuant {tot[1] / 1e3:.1f} ms "
          f"({100 * (tot[1] / tot[0] - 1):+.1f}%)\n")
    dense, tq = defaultdict(float), defaultdict(float)
    for i in range(first, n):
        for k, v in stats[i][2].items():
            dense[k] += v
        for k, v in stats[n + i][2].items():
            tq[k] += v
    print("| kernel | dense ms | TurboQuant ms | delta ms |")
    print("|---|---|---|---|")
    names = sorted(set(dense) | set(tq), key=lambda k: -abs(tq[k] - dense[k]))
    for k in names[:arg("--top", 20)]:
        print(f"| {k} | {dense[k] / 1e3:.2f} | {tq[k] / 1e3:.2f} | {(tq[k] - dense[k]) / 1e3:+.2f} |")


if __name__ == "__main__":
    main()
