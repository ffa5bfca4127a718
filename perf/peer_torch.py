"""What weft-perf's PyTorch peers share: torch with a GPU, or the one error
line (a JSON object) that weft-perf reads as the reason the peer was
skipped."""
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
