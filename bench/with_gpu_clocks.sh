#!/usr/bin/env bash
# Runs a command while nvidia-smi samples GPU 0 every 100 ms (SM clock, power, temperature, the
# active clock-throttle reasons) into LOG, then prints the busy samples (power over 150 W) in
# 2-second windows: whether the GPU slowed down during the run, and why. The clocks are only read.
# Usage: bench/with_gpu_clocks.sh LOG command [args...]
LOG=$1
shift
nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader,nounits -lms 100 > "$LOG" 2>/dev/null &
P=$!
"$@"
rc=$?
kill "$P" 2>/dev/null
wait "$P" 2>/dev/null
python3 - "$LOG" <<'PY'
import sys
from datetime import datetime
rows = []
for line in open(sys.argv[1]):
    p = [x.strip() for x in line.split(",")]
    try:
        t = datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((t, float(p[1]), float(p[2]), float(p[3]), p[4]))
    except (ValueError, IndexError):
        continue
if not rows:
    sys.exit(print("no nvidia-smi samples"))
t0 = rows[0][0]
bins = {}
for t, clk, pw, temp, why in rows:
    if pw > 150:
        bins.setdefault(int((t - t0) // 2), []).append((clk, pw, temp, why))
print("| t s | busy samples | SM MHz min / median | W median | temp C max | throttle reasons |")
print("|---|---|---|---|---|---|")
for b in sorted(bins):
    v = bins[b]
    clks = sorted(x[0] for x in v)
    pws = sorted(x[1] for x in v)
    print(f"| {2 * b} | {len(v)} | {clks[0]:.0f} / {clks[len(clks) // 2]:.0f} | {pws[len(pws) // 2]:.0f} | "
          f"{max(x[2] for x in v):.0f} | {' '.join(sorted(set(x[3] for x in v)))} |")
PY
exit $rc
