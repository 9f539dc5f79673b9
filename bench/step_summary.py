#!/usr/bin/env python3
# Per-step kernel time of a decode run, from a CUPTI trace (bench/cupti_trace.cpp: CSV
# start_ns,end_ns,grid_x,name; an unperturbed timeline) or an Nsight Compute CSV of
# gpu__time_duration.sum (kernels serialized: durations only). Steps start at each
# embedding_kernel launch. For the last N complete steps prints kernels per step, kernel time per
# step and, for a trace, the step's wall time and the idle time between kernels; then each kernel
# (name, grid) with its mean time per step. Usage: step_summary.py FILE.csv [--steps N]
import csv
import re
import subprocess
import sys
from collections import defaultdict


def demangle(name):
    """A mangled name's innermost identifier (c++filt-free: the last <len><id> before 'E')."""
    if not name.startswith("_Z"):
        return name
    ids, i = [], 2
    while i < len(name):
        m = re.match(r"(\d+)", name[i:])
        if not m:
            if name[i] in "EI":
                break
            i += 1
            continue
        n = int(m.group(1))
        i += len(m.group(1))
        ids.append(name[i:i + n])
        i += n
    return ids[-1] if ids else name


def short(name):
    name = demangle(name)
    base = name.replace("(anonymous namespace)", "").replace("<unnamed>", "").split("(")[0]
    return base.split("<")[0].split("::")[-1][:48] or name[:48]


def read(path):
    """[(start_us or None, end_us or None, dur_us, name, grid)] in launch order."""
    with open(path, newline="") as f:
        lines = f.readlines()
    quoted = [l for l in lines if l.startswith('"')]
    rows = []
    if quoted:  # Nsight Compute
        for r in csv.DictReader(quoted):
            if r.get("Metric Name") != "gpu__time_duration.sum":
                continue
            v = float(r["Metric Value"].replace(",", ""))
            unit = r.get("Metric Unit", "ns")
            us = v / 1000.0 if unit in ("ns", "nsecond") else v * 1000.0 if unit in ("ms", "msecond") else v
            rows.append((None, None, us, short(r["Kernel Name"]), r.get("Grid Size", "")))
        return rows
    for l in lines:
        parts = l.rstrip("\n").split(",", 3)
        if len(parts) == 4 and parts[0].isdigit():
            s, e = int(parts[0]) / 1000.0, int(parts[1]) / 1000.0
            rows.append((s, e, e - s, short(parts[3]), parts[2]))
    rows.sort(key=lambda r: r[0])
    return rows


def busy_us(rows):
    """GPU busy time of consecutive trace rows: the union of their kernel intervals (PDL overlaps them)."""
    t, busy = rows[0][0], 0.0
    for s, e, _, _, _ in rows:
        busy += max(0.0, e - max(s, t))
        t = max(t, e)
    return busy


def main():
    path = sys.argv[1]
    n_steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 3
    rows = read(path)
    starts = [i for i, r in enumerate(rows) if r[3].startswith("embedding")]
    if len(starts) < 2:
        print(f"{path}: {len(rows)} kernels, {len(starts)} steps found")
        return
    steps = list(zip(starts, starts[1:]))[-n_steps:]
    per, cnt = defaultdict(float), defaultdict(int)
    total = wall = busy = 0.0
    for a, b in steps:
        if rows[a][0] is not None:
            wall += (rows[b][0] - rows[a][0]) / len(steps)
            busy += busy_us(rows[a:b]) / len(steps)
        for _, _, us, name, grid in rows[a:b]:
            per[(name, grid)] += us / len(steps)
            cnt[(name, grid)] += 1
            total += us / len(steps)
    n_k = sum(b - a for a, b in steps) / len(steps)
    head = f"{path}: {len(steps)} steps, {n_k:.0f} kernels/step, kernel time {total / 1000:.3f} ms/step"
    if wall:
        head += f", wall {wall / 1000:.3f} ms/step, GPU busy {busy / 1000:.3f}, idle {(wall - busy) / 1000:.3f}"
    print(head)
    print("| kernel | grid | launches/step | us/step | us/launch | share |")
    print("|---|---|---|---|---|---|")
    for (name, grid), us in sorted(per.items(), key=lambda kv: -kv[1])[:25]:
        n = cnt[(name, grid)] / len(steps)
        print(f"| {name} | {grid} | {n:.0f} | {us:.1f} | {us / n:.1f} | {100 * us / total:.1f}% |")


if __name__ == "__main__":
    main()
