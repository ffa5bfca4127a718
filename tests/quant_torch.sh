#!/bin/sh
# libweft's FP8 writer, both formulas, against PyTorch's evaluation of
# them on the GPU (quant_torch.py). Skips (77) without python3, PyTorch or
# a GPU.
command -v python3 >/dev/null 2>&1 || { echo "quant_torch: no python3: skipped"; exit 77; }
exec python3 "${srcdir:-.}/quant_torch.py" .
