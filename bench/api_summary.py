#!/usr/bin/env python3
# Host time of a mid-prefill run, from bench/cupti_trace.cpp's $TQ_TRACE_API file (runtime calls
# and kernels, one clock, with launch correlations). The run prefills the same prompt twice (dense,
# then with the forced conversion), N chunks each, every chunk starting at an embedding kernel.
# A chunk's host window runs from its embedding launch call to the next chunk's; the TurboQuant
# run's window before its chunk --from holds the conversion. For the last 2N chunks prints each
# window's host time, the time inside runtime calls, and the largest calls; then, for the chunks
# from --from - 1 on, per call name the total time TurboQuant minus dense. Usage:
#   api_summary.py API.csv --chunks 8 [--from 4]
import sys
from collections import defaultdict


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def read(path):
    """(calls, kernels): lists of (start_us, end_us, correlation, name), each sorted by start."""
    calls, kernels = [], []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(",", 3)
            if len(parts) != 4 or not parts[0].isdigit():
                continue
            rec = (int(parts[0]) / 1000.0, int(parts[1]) / 1000.0, int(parts[2]), parts[3])
            (kernels if rec[3].startswith("kernel:") else calls).append(rec)
    calls.sort()
    kernels.sort()
    return calls, kernels


def window(calls, a, b):
    """(inside_us, {name: us}, {name: count}) of the calls that start in [a, b)."""
    per, cnt, inside = defaultdict(float), defaultdict(int), 0.0
    for s, e, _, name in calls:
        if a <= s < b:
            per[name] += e - s
            cnt[name] += 1
            inside += e - s
    return inside, per, cnt


def main():
    calls, kernels = read(sys.argv[1])
    n, first = arg("--chunks", 8), arg("--from", 0)
    launch = {c: s for s, _, c, name in calls if "Launch" in name}
    starts = [launch[c] for _, _, c, name in kernels if "embedding" in name and c in launch]
    if len(starts) < 2 * n:
        print(f"{sys.argv[1]}: {len(starts)} chunk launches found, need {2 * n}")
        return
    starts = starts[-2 * n:]
    ends = starts[1:] + [max(e for _, e, _, _ in calls)]
    wins = [window(calls, a, b) for a, b in zip(starts, ends)]
    print("| chunk | dense host ms | dense in calls ms | TQ host ms | TQ in calls ms | TQ's largest calls (ms, count) |")
    print("|---|---|---|---|---|---|")
    for i in range(n):
        d, t = wins[i], wins[n + i]
        top = sorted(t[1].items(), key=lambda kv: -kv[1])[:3]
        tops = ", ".join(f"{k} {v / 1000:.2f} ({t[2][k]})" for k, v in top)
        print(f"| {i} | {(ends[i] - starts[i]) / 1000:.2f} | {d[0] / 1000:.2f} | "
              f"{(ends[n + i] - starts[n + i]) / 1000:.2f} | {t[0] / 1000:.2f} | {tops} |")
    lo = max(first - 1, 0)
    dense, tq = defaultdict(float), defaultdict(float)
    dcnt, tcnt = defaultdict(int), defaultdict(int)
    for i in range(lo, n):
        for k, v in wins[i][1].items():
            dense[k] += v
            dcnt[k] += wins[i][2][k]
        for k, v in wins[n + i][1].items():
            tq[k] += v
            tcnt[k] += wins[n + i][2][k]
    print(f"\nChunks {lo}-{n - 1} (TurboQuant's chunk {lo} holds the conversion), per call, ms:\n")
    print("| call | dense ms (count) | TQ ms (count) | TQ - dense ms |")
    print("|---|---|---|---|")
    names = sorted(set(dense) | set(tq), key=lambda k: -abs(tq[k] - dense[k]))
    for k in names[:15]:
        print(f"| {k} | {dense[k] / 1000:.3f} ({dcnt[k]}) | {tq[k] / 1000:.3f} ({tcnt[k]}) | "
              f"{(tq[k] - dense[k]) / 1000:+.3f} |")


if __name__ == "__main__":
    main()
