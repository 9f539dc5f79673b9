# Same-run baseline for bench_cuda_prefill: PyTorch scaled_dot_product_attention causal prefill
# (bf16, is_causal=True, 32 q / 8 kv heads via enable_gqa=True, d=128, batch 1, T = L = 4K, 32K),
# CUDA-graph timed like bench_cuda_sdpa.py, then the merged table against our kernels' CSV files.
# FLOPs = 4 * T * L / 2 * d * n_head for both. Usage:
#   python3 bench_cuda_sdpa_prefill.py OURS.csv[,MORE.csv...] [OUT.md]
import csv
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HQ, HK, D = 32, 8, 128


def flops(T, L):
    return 4.0 * T * L / 2 * D * HQ


def time_graph_ms(fn, n):
    s_ = torch.cuda.Stream()
    s_.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s_):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s_)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / n)
    ts.sort()
    return ts[len(ts) // 2]


def time_sdpa(T, backend=None):
    q = torch.randn(1, HQ, T, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, HK, T, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, HK, T, D, device="cuda", dtype=torch.bfloat16)

    def fn():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    n = 2 if T >= 16384 else 10
    if backend is None:
        return time_graph_ms(fn, n)
    with sdpa_kernel([backend]):
        return time_graph_ms(fn, n)


def main():
    ours = {}
    for path in sys.argv[1].split(","):
        try:
            with open(path) as f:
                for r in csv.DictReader(f):
                    ours[(r["kernel"], int(r["T"]))] = float(r["ms"])
        except OSError as e:
            print(f"skipping {path}: {e}")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    kernels = sorted({k for k, _ in ours}, key=lambda k: (k != "bf16", k != "tq4", k))
    head = "| T = L | SDPA default ms (TFLOP/s) | SDPA flash / cudnn / efficient ms | " + \
        " | ".join(f"ours {k} ms (TFLOP/s, vs SDPA)" for k in kernels) + " |"
    lines = [head, "|" + "---|" * (3 + len(kernels))]
    for T in (4096, 32768):
        if not any((k, T) in ours for k in kernels):
            continue
        sd = time_sdpa(T)
        others = []
        for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                  SDPBackend.EFFICIENT_ATTENTION):
            try:
                others.append(f"{time_sdpa(T, b):.3f}")
            except Exception as e:  # a backend that refuses the shape or graph capture
                print(f"T={T} {b}: {str(e).splitlines()[0][:120]}")
                others.append("-")
        torch.cuda.empty_cache()
        cells = []
        for k in kernels:
            ms = ours.get((k, T))
            cells.append("-" if ms is None else
                         f"{ms:.3f} ({flops(T, T) / ms / 1e9:.0f}, {sd / ms:.2f}x)")
        lines.append(f"| {T} | {sd:.3f} ({flops(T, T) / sd / 1e9:.0f}) | {' / '.join(others)} | "
                     + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print("causal prefill, batch 1, 32 q / 8 kv heads (SDPA: enable_gqa=True), d=128, bf16; "
          "flops = 4 T L / 2 d n_head; graph-timed\n" + table)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
