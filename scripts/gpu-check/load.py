"""A real CUDA load for the metrics check: bf16 matmuls for N seconds."""

import sys
import time

import torch

end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
hold = torch.empty(20 * 1024**3, dtype=torch.uint8, device="cuda")  # 20 GiB held
n = 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
print(f"load: {n} matmuls 8192^3 bf16, {hold.numel() / 1024**3:.0f} GiB held", flush=True)
