#!/usr/bin/env python3
# Per-step decode breakdown from an nsys SQLite export (bench/run_cuda_decode_profile.sh): steps
# are delimited by the logits downloads (the largest device-to-host copies); for the steady-state
# steps prints the step wall time, GPU busy time, idle gaps, launches, the host's API time
# (launch calls vs synchronize waits), and each kernel (name, grid) with its mean time per step.
# Usage: nsys_decode_steps.py FILE.sqlite [--skip N]
import sqlite3
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    skip = int(sys.argv[sys.argv.index("--skip") + 1]) if "--skip" in sys.argv else 4
    db = sqlite3.connect(path)
    names = dict(db.execute("SELECT id, value FROM StringIds"))
    kcols = [r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    nm = "shortName" if "shortName" in kcols else "demangledName"
    kernels = [(s, e, names.get(n, str(n)), gx, bx) for s, e, n, gx, bx in db.execute(
        f"SELECT start, end, {nm}, gridX, blockX FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")]
    copies = list(db.execute(
        "SELECT start, end, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start"))
    api = []
    try:
        api = [(s, e, names.get(n, str(n))) for s, e, n in db.execute(
            "SELECT start, end, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start")]
    except sqlite3.Error as ex:
        print("no runtime API table:", ex)
    d2h = [c for c in copies if c[2] == 2]
    if not d2h:
        print("no device-to-host copies: cannot find steps")
        return
    big = max(c[3] for c in d2h)
    marks = [c for c in d2h if c[3] == big]
    steps = [(marks[i - 1][1], marks[i][1]) for i in range(1 + skip, len(marks))]
    print(f"{len(marks)} logits downloads ({big} B); steady steps analysed: {len(steps)}")
    if not steps:
        return
    n = len(steps)
    t0, t1 = steps[0][0], steps[-1][1]
    ks = [k for k in kernels if t0 < k[0] <= t1]
    busy = sum(e - s for s, e, *_ in ks)
    cp = sum(e - s for s, e, *_ in copies if t0 < s <= t1)
    wall = t1 - t0
    print(f"step wall {wall / n / 1e3:.1f} us; kernels {busy / n / 1e3:.1f} us; copies "
          f"{cp / n / 1e3:.1f} us; idle {(wall - busy - cp) / n / 1e3:.1f} us; "
          f"launches/step {len(ks) / n:.1f}")
    # Gaps between consecutive kernels inside a step (launch-bound if large and many).
    gaps = [ks[i][0] - ks[i - 1][1] for i in range(1, len(ks))]
    gaps = [g for g in gaps if g > 0]
    if gaps:
        gs = sorted(gaps)
        print(f"kernel-to-kernel gaps: median {gs[len(gs) // 2] / 1e3:.2f} us, p90 "
              f"{gs[int(len(gs) * 0.9)] / 1e3:.2f} us, sum/step {sum(gs) / n / 1e3:.1f} us")
    if api:
        per = defaultdict(lambda: [0, 0])
        for s, e, a in api:
            if t0 < s <= t1:
                per[a][0] += e - s
                per[a][1] += 1
        print("host API per step (us, calls):")
        for a, (t, c) in sorted(per.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"  {a:40s} {t / n / 1e3:9.1f} {c / n:7.1f}")
        # Host issue time: from a step's start to its last launch call (excluding waits).
        spans = []
        for a, b in steps:
            calls = [(s, e, x) for s, e, x in api if a < s <= b and "Synchronize" not in x]
            if calls:
                spans.append(max(e for s, e, x in calls) - a)
        if spans:
            print(f"host: last API call ends {sum(spans) / len(spans) / 1e3:.1f} us after the "
                  "step starts (mean)")
    per = defaultdict(lambda: [0, 0])
    for s, e, name, gx, bx in ks:
        per[(name[:60], gx, bx)][0] += e - s
        per[(name[:60], gx, bx)][1] += 1
    print("| kernel | grid | block | calls/step | us/call | us/step |")
    print("|---|---|---|---|---|---|")
    for (name, gx, bx), (t, c) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"| {name} | {gx} | {bx} | {c / n:.1f} | {t / c / 1e3:.2f} | {t / n / 1e3:.1f} |")


if __name__ == "__main__":
    main()
