"""The staged optimizers (<weft/optim.h>) from Python: AdamW and Muon over
FP32 masters that libweft keeps (or adopts), each updated matrix handed to
a writer while it is still where the update left it: the ready-made FP8
writer into a registry version (no Python on that path), or a Python
function.

    opt = weft.Optimizer()                           # placement "host", "staged" or "resident"
    g = opt.add_group("model.layers.0.mlp.experts.{E}.w13", (E, 2 * I, H), "adamw", lr=1e-5)
    g.state("master")[:] = initial_weights           # libweft's memory, no copy
    writer = opt.writer(reg)                         # W, WT, scale_inv by tensor name
    with reg.write() as v:
        opt.step([grad], writer=writer)
        v.publish()
"""

from . import _tensors
from ._errors import check
from ._handle import Handle
from ._lib import load
from .quant import formula_code

_PLACEMENTS = {"host": "WEFT_OPTIM_HOST", "staged": "WEFT_OPTIM_STAGED", "resident": "WEFT_OPTIM_RESIDENT"}
_STATES = {"master": "WEFT_OPTIM_STATE_MASTER", "exp_avg": "WEFT_OPTIM_STATE_EXP_AVG",
           "exp_avg_sq": "WEFT_OPTIM_STATE_EXP_AVG_SQ", "momentum": "WEFT_OPTIM_STATE_MOMENTUM"}


class Group:
    """A parameter group: index, name, algo, shape ([E, rows, cols] or
    [rows, cols]) and its state arrays."""

    def __init__(self, optimizer, index, name, algo, shape):
        self._optimizer, self.index, self.name, self.algo, self.shape = optimizer, index, name, algo, shape

    def state(self, which="master"):
        """The FP32 array of `which` ("master", "exp_avg", "exp_avg_sq",
        "momentum"), in place: a NumPy array on the host placements, a
        DeviceArray when resident. Written by the next step."""
        ffi, lib = load()
        if which not in _STATES:
            raise ValueError("state must be one of %s, not %r" % (", ".join(_STATES), which))
        data = ffi.new("float **")
        check(lib.weft_optim_group_state(self._optimizer.handle, self.index, getattr(lib, _STATES[which]), data),
              "weft_optim_group_state", which)
        memory = "cuda" if self._optimizer.placement == "resident" else "host"
        return _tensors.array_at(data[0], self.shape, _tensors.row_major(self.shape), "fp32", memory,
                                 self._optimizer.device, True, self._optimizer)


class RegistryWriter(Handle):
    """libweft's writer of each updated matrix into the registry version
    being written (weft_optim_writer_*): format "fp8" (W, WT, scale_inv,
    blockwise) or "bf16"; tensors found by the group's name with "{E}" the
    expert, then ".weight", ".weight_t", ".weight_scale_inv". formula: the
    FP8 arithmetic, "exact" (libweft's default) or "reference" (DeepGEMM's
    per_block_cast_to_fp8 as PyTorch computes it; see weft.quantize)."""

    _destroy = "weft_optim_writer_destroy"

    def __init__(self, optimizer, registry, format="fp8", block=None, write_wt=None, ue8m0=None, formula=None):
        ffi, lib = load()
        self._handle, self._registry = None, registry
        params = ffi.new("weft_optim_writer_params_t *")
        if format not in ("fp8", "bf16"):
            raise ValueError("format must be \"fp8\" or \"bf16\", not %r" % (format,))
        params.field_mask = lib.WEFT_OPTIM_WRITER_FIELD_FORMAT
        params.format = lib.WEFT_OPTIM_WRITE_FP8 if format == "fp8" else lib.WEFT_OPTIM_WRITE_BF16
        for field, value, attr in ((lib.WEFT_QUANT_FIELD_BLOCK, block, "block"),
                                   (lib.WEFT_QUANT_FIELD_WRITE_WT, write_wt, "write_wt"),
                                   (lib.WEFT_QUANT_FIELD_UE8M0, ue8m0, "ue8m0")):
            if value is not None:
                params.field_mask |= lib.WEFT_OPTIM_WRITER_FIELD_QUANT
                params.quant.field_mask |= field
                setattr(params.quant, attr, int(value))
        if formula is not None:
            params.field_mask |= lib.WEFT_OPTIM_WRITER_FIELD_QUANT
            params.quant.field_mask |= lib.WEFT_QUANT_FIELD_FORMULA
            params.quant.formula = formula_code(formula)
        handle = ffi.new("weft_optim_writer_h *")
        check(lib.weft_optim_writer_create(optimizer.handle, registry.handle, params, handle),
              "weft_optim_writer_create")
        self._handle = handle[0]


class Optimizer(Handle):
    """An optimizer (weft_optim_create). placement: "host" (CPU threads),
    "staged" (pinned host masters through GPU slots) or "resident" (on the
    GPU); device, slots, slot_bytes, threads as <weft/optim.h> says."""

    _destroy = "weft_optim_destroy"

    def __init__(self, placement="host", device=0, slots=None, slot_bytes=None, threads=None):
        ffi, lib = load()
        self._handle = None
        if placement not in _PLACEMENTS:
            raise ValueError("placement must be one of %s, not %r" % (", ".join(_PLACEMENTS), placement))
        params = ffi.new("weft_optim_params_t *")
        params.field_mask = lib.WEFT_OPTIM_FIELD_PLACEMENT | lib.WEFT_OPTIM_FIELD_DEVICE
        params.placement, params.device = getattr(lib, _PLACEMENTS[placement]), device
        for field, value, attr in ((lib.WEFT_OPTIM_FIELD_SLOT_COUNT, slots, "slot_count"),
                                   (lib.WEFT_OPTIM_FIELD_SLOT_BYTES, slot_bytes, "slot_bytes"),
                                   (lib.WEFT_OPTIM_FIELD_THREADS, threads, "threads")):
            if value is not None:
                params.field_mask |= field
                setattr(params, attr, value)
        handle = ffi.new("weft_optim_h *")
        check(lib.weft_optim_create(params, handle), "weft_optim_create")
        self._handle, self.placement, self.device, self.groups = handle[0], placement, device, []
        self._callback = None

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("the optimizer was closed")
        return self._handle

    def add_group(self, name, shape, algo="adamw", lr=None, betas=None, eps=None, weight_decay=None,
                  momentum=None, nesterov=None, ns_steps=None, scale=None, rounding=None):
        """A group of [E, rows, cols] expert matrices (each its own unit) or
        one [rows, cols] tensor; hyperparameters as <weft/optim.h>'s
        (None: its defaults). scale (Muon): "shape" or "match_adamw";
        rounding (Muon): "fused" or "eager"."""
        ffi, lib = load()
        shape = tuple(int(n) for n in shape)
        if len(shape) not in (2, 3):
            raise ValueError("a group is [experts, rows, cols] or [rows, cols], not %s" % (shape,))
        desc = ffi.new("weft_optim_group_desc_t *")
        name_c = ffi.new("char[]", name.encode())
        desc.name = name_c
        if algo == "adamw":
            desc.algo = lib.WEFT_OPTIM_ADAMW
            h = desc.adamw
            h.lr, h.beta1, h.beta2, h.eps, h.weight_decay = 1e-3, 0.9, 0.999, 1e-8, 1e-2
            given = [lr, betas, eps, weight_decay]
            if any(v is not None for v in given):
                desc.field_mask |= lib.WEFT_OPTIM_GROUP_FIELD_ADAMW
                h.lr = h.lr if lr is None else lr
                if betas is not None:
                    h.beta1, h.beta2 = betas
                h.eps = h.eps if eps is None else eps
                h.weight_decay = h.weight_decay if weight_decay is None else weight_decay
        elif algo == "muon":
            desc.algo = lib.WEFT_OPTIM_MUON
            h = desc.muon
            h.lr, h.momentum, h.weight_decay, h.nesterov, h.ns_steps = 0.02, 0.95, 0.0, 1, 5
            h.scale, h.schedule = lib.WEFT_MUON_SCALE_SHAPE, lib.WEFT_MUON_NS_SIMPLE
            if any(v is not None for v in (lr, momentum, weight_decay, nesterov, ns_steps, scale)):
                desc.field_mask |= lib.WEFT_OPTIM_GROUP_FIELD_MUON
                h.lr = h.lr if lr is None else lr
                h.momentum = h.momentum if momentum is None else momentum
                h.weight_decay = h.weight_decay if weight_decay is None else weight_decay
                h.nesterov = h.nesterov if nesterov is None else int(bool(nesterov))
                h.ns_steps = h.ns_steps if ns_steps is None else ns_steps
                if scale is not None:
                    h.scale = {"shape": lib.WEFT_MUON_SCALE_SHAPE,
                               "match_adamw": lib.WEFT_MUON_SCALE_MATCH_ADAMW}[scale]
            if rounding is not None:
                desc.field_mask |= lib.WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING
                desc.muon_rounding = {"fused": lib.WEFT_MUON_ROUNDING_FUSED,
                                      "eager": lib.WEFT_MUON_ROUNDING_EAGER}[rounding]
        else:
            raise ValueError("algo must be \"adamw\" or \"muon\", not %r" % (algo,))
        desc.experts = shape[0] if len(shape) == 3 else 0
        desc.rows, desc.cols = shape[-2], shape[-1]
        index = ffi.new("uint32_t *")
        check(lib.weft_optim_add_group(self.handle, desc, index), "weft_optim_add_group", name)
        group = Group(self, index[0], name, algo, shape)
        self.groups.append(group)
        return group

    def writer(self, registry, **kw):
        """libweft's RegistryWriter into `registry`'s version being written."""
        return RegistryWriter(self, registry, **kw)

    def step(self, grads, writer=None, stream=None):
        """One step of every group, grads[i] the gradient of group i (FP32,
        or BF16 as raw uint16 / torch.bfloat16; host, or on the
        optimizer's GPU). writer: a RegistryWriter (its C function runs for
        each matrix, no Python in between), a Python function
        writer(unit: dict, master: array) returning nothing, or None."""
        ffi, lib = load()
        if len(grads) != len(self.groups):
            raise ValueError("%d gradients for %d groups" % (len(grads), len(self.groups)))
        c_grads = ffi.new("weft_optim_grad_t[]", max(1, len(grads)))
        keep = []
        for i, (grad, group) in enumerate(zip(grads, self.groups)):
            ref = _tensors.array_ref(grad)
            if tuple(ref.shape) != group.shape or not ref.contiguous():
                raise ValueError("gradient %d: shape %s contiguous, the group's %s" % (i, tuple(ref.shape), group.shape))
            if ref.itemsize not in (2, 4):
                raise ValueError("gradient %d: FP32 or BF16 elements" % i)
            c_grads[i].data = ffi.cast("void *", ref.ptr)
            c_grads[i].dtype = lib.WEFT_DTYPE_FP32 if ref.itemsize == 4 else lib.WEFT_DTYPE_BF16
            c_grads[i].memory = lib.WEFT_MEMORY_CUDA if ref.memory == "cuda" else lib.WEFT_MEMORY_HOST
            keep.append(ref)
        params = ffi.new("weft_optim_step_params_t *")
        callback = None
        if isinstance(writer, RegistryWriter):
            params.field_mask |= lib.WEFT_OPTIM_STEP_FIELD_WRITER
            params.writer = lib.weft_optim_writer_write
            params.writer_arg = writer._handle
        elif writer is not None:
            errors = []

            def call(arg, unit):
                try:
                    writer(_unit_dict(unit), _unit_master(unit, self.device))
                    return 0
                except Exception as exc:  # noqa: BLE001 - handed back after the step
                    errors.append(exc)
                    return lib.WEFT_ERR_CANCELED

            callback = ffi.callback("weft_optim_writer_fn", call)
            params.field_mask |= lib.WEFT_OPTIM_STEP_FIELD_WRITER
            params.writer = callback
        if stream is not None:
            params.field_mask |= lib.WEFT_OPTIM_STEP_FIELD_STREAM
            params.stream = ffi.cast("void *", getattr(stream, "cuda_stream", stream))
        status = lib.weft_optim_step(self.handle, c_grads, len(grads), params)
        if callback is not None and errors:
            raise errors[0]
        check(status, "weft_optim_step")

    def info(self):
        ffi, lib = load()
        info = ffi.new("weft_optim_info_t *")
        check(lib.weft_optim_get_info(self.handle, info), "weft_optim_get_info")
        return {field: getattr(info, field) for field, _ in ffi.typeof("weft_optim_info_t").fields}

    def save(self, path):
        """A checkpoint of every group's masters, state and step count."""
        check(load()[1].weft_optim_save(self.handle, str(path).encode()), "weft_optim_save", str(path))

    def restore(self, path):
        check(load()[1].weft_optim_restore(self.handle, str(path).encode()), "weft_optim_restore", str(path))

def _unit_dict(unit):
    ffi, _ = load()
    return {"group": unit.group, "expert": unit.expert, "name": ffi.string(unit.name).decode(),
            "rows": unit.rows, "cols": unit.cols, "step": unit.step}

def _unit_master(unit, device):
    memory = "cuda" if unit.memory == load()[1].WEFT_MEMORY_CUDA else "host"
    return _tensors.array_at(unit.master, (unit.rows, unit.cols), (unit.cols, 1), "fp32", memory, device, False,
                             None)
