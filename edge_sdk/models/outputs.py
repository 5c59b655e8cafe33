"""Models with more than one output (detectors, landmark models: 2-4 each).

A package keeps one output tensor end to end (the runner, the golden pair, deploy's check, bench): a
model with several outputs is compiled with main returning their concatenation, each output flattened and
cast to float32, in the file's output order. The manifest's "outputs" lists each one (name, shape, dtype,
offset and size in the flat vector, its golden range), and `split` turns a flat output back into named
arrays (run --save-output, --json, the app's --output NAME).
"""
from __future__ import annotations

import math

import numpy as np

from edge_sdk.errors import ModelError


def output_entries(specs: list[tuple[str, tuple[int, ...], str]]) -> list[dict]:
    """[(name, shape, dtype)] -> the manifest's "outputs" rows, with offset and size in the flat vector."""
    rows, offset = [], 0
    for name, shape, dtype in specs:
        size = int(math.prod(shape))
        rows.append({"name": name, "shape": [int(s) for s in shape], "dtype": dtype, "offset": offset, "size": size})
        offset += size
    return rows


def flatten_main(mod, specs: list[tuple[str, tuple[int, ...], str]], path):
    """main returning a tuple of the file's outputs -> main returning one float32 vector (their concatenation)."""
    from tvm import relax

    func = mod["main"]
    body = func.body
    ret = body.body
    fields = getattr(ret.ty, "fields", None)
    if fields is None or len(fields) != len(specs):
        raise ModelError(f"{path}: the file lists {len(specs)} outputs, the import returned "
                         f"{len(fields) if fields is not None else 1}")
    bindings, flat = [], []
    for i, ((name, shape, _), ty) in enumerate(zip(specs, fields)):
        got = tuple(int(v) for v in ty.shape)
        if math.prod(got) != math.prod(shape):
            raise ModelError(f"{path}: output '{name}' has shape {list(got)} after import, the file says {list(shape)}")
        item = relax.TupleGetItem(ret, i)
        if ty.dtype != "float32":
            item = relax.op.astype(item, "float32")
        v = relax.Var(f"out{i}", relax.TensorType((math.prod(shape),), "float32"))
        bindings.append(relax.VarBinding(v, relax.op.reshape(item, (math.prod(shape),))))
        flat.append(v)
    total = sum(math.prod(s) for _, s, _ in specs)
    ty = relax.TensorType((total,), "float32")
    out = relax.Var("outputs", ty)
    bindings.append(relax.VarBinding(out, relax.op.concat(flat, axis=0)))
    block = relax.BindingBlock(bindings)
    mod["main"] = relax.Function(func.params, relax.SeqExpr([*body.blocks, block], out), ty, attrs=func.attrs)
    return relax.transform.Normalize()(mod)


def concat_outputs(arrays: list[np.ndarray]) -> np.ndarray:
    """A peer's outputs (file order) as the package's flat float32 vector."""
    return np.concatenate([np.asarray(a, np.float32).reshape(-1) for a in arrays])


def split(flat: np.ndarray, outputs: list[dict] | None) -> dict[str, np.ndarray]:
    """The package's output -> {name: array of the file's shape and dtype}; one entry "output" when the
    manifest lists no outputs (a single-output package). The device loader's split_outputs, which ships."""
    from edge_sdk.runtime.device.loader import LoaderError, split_outputs

    try:
        return split_outputs(flat, outputs)
    except LoaderError as e:
        raise ModelError(str(e)) from e
