#!/bin/sh
# libweft's AdamW against PyTorch's fused CUDA AdamW (optim_torch.py).
# Skips (77) without python3, PyTorch or a GPU.
command -v python3 >/dev/null 2>&1 || { echo "optim_torch: no python3: skipped"; exit 77; }
exec python3 "${srcdir:-.}/optim_torch.py" .
