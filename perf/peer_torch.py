"""What weft-perf's PyTorch peers share: torch with a GPU, or the one error
line (a JSON object) that weft-perf reads as the reason the peer was
skipped; the staged AdamW step and the block FP8 quantizer a PyTorch user
would write."""
import json


def torch_with_gpu():
    """The torch module when it imports and sees a GPU; None otherwise,
    after printing {"error": ...} (the caller exits 3)."""
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": "torch not available: %s" % e}))
        return None
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch finds no CUDA device"}))
        return None
    return torch


def staged_adamw(torch, master, exp_avg, exp_avg_sq, grad, chunk, lr):
    """A staged AdamW step as a user would write it, returned as step().

    master, exp_avg and exp_avg_sq: flat pinned FP32 host tensors; grad: the
    flat FP32 gradient on the GPU. Chunks of `chunk` elements go through two
    GPU buffer sets: H2D on one stream, torch._fused_adamw_ on another, D2H
    on a third, events between them (double buffering). step() enqueues one
    step behind the current stream's work and makes the current stream wait
    for its last copy home."""
    n, c = master.numel(), chunk
    dev = grad.device
    bufs = [[torch.empty(c, dtype=torch.float32, device=dev) for _ in range(3)] for _ in range(2)]
    steps = [torch.zeros((), dtype=torch.float32, device=dev) for _ in range(2)]
    h2d, comp, d2h = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    loaded = [torch.cuda.Event() for _ in range(2)]
    computed = [torch.cuda.Event() for _ in range(2)]
    freed = [torch.cuda.Event() for _ in range(2)]
    step_no = [0]

    def step():
        step_no[0] += 1
        for k in range(2):
            steps[k].fill_(float(step_no[0]))
        start = torch.cuda.current_stream()
        h2d.wait_stream(start)
        comp.wait_stream(start)
        for i, lo in enumerate(range(0, n, c)):
            k = i % 2
            hi = min(lo + c, n)
            m = hi - lo
            p_dev, m_dev, v_dev = (b[:m] for b in bufs[k])
            with torch.cuda.stream(h2d):
                if i >= 2:
                    h2d.wait_event(freed[k])
                p_dev.copy_(master[lo:hi], non_blocking=True)
                m_dev.copy_(exp_avg[lo:hi], non_blocking=True)
                v_dev.copy_(exp_avg_sq[lo:hi], non_blocking=True)
                loaded[k].record(h2d)
            with torch.cuda.stream(comp):
                comp.wait_event(loaded[k])
                torch._fused_adamw_([p_dev], [grad[lo:hi]], [m_dev], [v_dev], [], [steps[k]], lr=lr,
                                    beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                                    maximize=False)
                computed[k].record(comp)
            with torch.cuda.stream(d2h):
                d2h.wait_event(computed[k])
                master[lo:hi].copy_(p_dev, non_blocking=True)
                exp_avg[lo:hi].copy_(m_dev, non_blocking=True)
                exp_avg_sq[lo:hi].copy_(v_dev, non_blocking=True)
                freed[k].record(d2h)
        start.wait_stream(d2h)

    return step


def block_fp8_quantizer(torch, block):
    """The block FP8 quantizer of x [E, rows, cols] FP32, to be compiled:
    amax per block, s = max(amax, 1e-4) / 448, q = float8_e4m3fn(x / s)
    (saturated); returns W and WT contiguous and the scales (scale_inv)."""
    b = block

    def quant(x):
        e, n, k = x.shape
        xb = x.view(e, n // b, b, k // b, b)
        amax = xb.abs().amax(dim=(2, 4)).clamp(min=1e-4)
        s = amax / 448.0
        q = (xb / s[:, :, None, :, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        w = q.view(e, n, k)
        wt = w.transpose(1, 2).contiguous()
        return w, wt, s

    return quant


def reference_fp8_quantizer(torch, block):
    """The same outputs by the reference formula (DeepGEMM's
    per_block_cast_to_fp8: x * (448 / amax), scale_inv = amax / 448), to be
    compiled; the peer of `weft-perf quant --formula reference`."""
    b = block

    def quant(x):
        e, n, k = x.shape
        xb = x.view(e, n // b, b, k // b, b)
        amax = xb.abs().amax(dim=(2, 4)).clamp(min=1e-4)
        q = (xb * (448.0 / amax)[:, :, None, :, None]).to(torch.float8_e4m3fn)
        w = q.view(e, n, k)
        wt = w.transpose(1, 2).contiguous()
        return w, wt, amax / 448.0

    return quant
