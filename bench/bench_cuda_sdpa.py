# Same-run baseline for bench_cuda_attention: PyTorch scaled_dot_product_attention decode (bf16,
# 32 q / 8 kv heads, d=128, batch 1 and 8, contexts 4K-128K), then the merged table against our
# kernels' CSV. Usage: python3 bench_cuda_sdpa.py OURS.csv [OUT.md]
import csv
import sys

import torch
import torch.nn.functional as F


def time_sdpa(B, L, n_sets):
    Hq, Hk, d = 32, 8, 128
    sets = []
    for _ in range(n_sets):
        k = torch.randn(B, Hk, L, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, Hk, L, d, device="cuda", dtype=torch.bfloat16)
        sets.append((k, v))
    q = torch.randn(B, Hq, 1, d, device="cuda", dtype=torch.bfloat16)
    for i in range(5):
        k, v = sets[i % n_sets]
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
    times = []
    for i in range(50):
        k, v = sets[i % n_sets]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    sync_each = times[len(times) // 2] * 1e3
    # GPU time without Python launch overhead: 20 calls (rotating sets) captured in a CUDA graph.
    n = 20
    g = torch.cuda.CUDAGraph()
    s_ = torch.cuda.Stream()
    s_.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s_):
        for i in range(3):
            F.scaled_dot_product_attention(q, *sets[i % n_sets], enable_gqa=True)
    torch.cuda.current_stream().wait_stream(s_)
    with torch.cuda.graph(g):
        for i in range(n):
            k, v = sets[i % n_sets]
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    g.replay()
    torch.cuda.synchronize()
    gt = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        gt.append(s.elapsed_time(e) / n)
    gt.sort()
    return gt[len(gt) // 2] * 1e3, sync_each


def main():
    ours = {}
    ceiling = None
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            if r["kernel"] == "copy_ceiling":
                ceiling = float(r["gbps"])
            else:
                ours[(r["kernel"], int(r["batch"]), int(r["ctx"]))] = r
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    lines = ["| B | ctx | SDPA bf16 us (graph; synced) | ours bf16 us | ours TQ4 us | TQ4 vs SDPA | TQ4 GB/s | TQ4 % of copy BW | TQ4+tail128 us (vs SDPA, % BW) | bf16 % of copy BW |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for B in (1, 8):
        for L in (4096, 32768, 131072):
            b16 = ours.get(("bf16_decode", B, L))
            t4 = ours.get(("tq4_decode", B, L))
            if not b16 or not t4:
                continue
            set_bytes = 2 * B * 8 * L * 128 * 2
            n_sets = max(1, min(64, (512 << 20) // set_bytes))
            sdpa, sdpa_sync = time_sdpa(B, L, n_sets)
            torch.cuda.empty_cache()
            tu, bu = float(t4["us"]), float(b16["us"])
            tt = ours.get(("tq4_decode_tail128", B, L))
            tail = (f"{float(tt['us']):.1f} ({sdpa / float(tt['us']):.2f}x, "
                    f"{100 * float(tt['gbps']) / ceiling:.0f}%)") if tt else "-"
            lines.append(f"| {B} | {L} | {sdpa:.1f}; {sdpa_sync:.1f} | {bu:.1f} ({sdpa / bu:.2f}x) | "
                         f"{tu:.1f} | {sdpa / tu:.2f}x | {float(t4['gbps']):.0f} | "
                         f"{100 * float(t4['gbps']) / ceiling:.0f}% | {tail} | "
                         f"{100 * float(b16['gbps']) / ceiling:.0f}% |")
    table = "\n".join(lines)
    print(f"copy ceiling {ceiling:.0f} GB/s\n" + table)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
