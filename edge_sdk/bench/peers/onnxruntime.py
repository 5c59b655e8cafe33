"""ONNX Runtime (CPU execution provider, all graph optimizations, sequential) as a bench peer.

One module per engine (edge_sdk/bench/peers/; see litert.py). The top level imports only the standard
library; `import onnxruntime` inside `load` is the installed package (absolute import)."""
from __future__ import annotations

ENGINE = "onnxruntime"
PEERS = (("float32", "float", "onnxruntime_float32.onnx", None), ("int8", "int8", "onnxruntime_int8.onnx", None))
MODULE, INSTALL = "onnxruntime", "pip install -e '.[test]' (onnxruntime)"


def emulate_unavailable(threads: int) -> str | None:
    return "not counted under qemu (LiteRT is the A53 reference)"


def load(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    dtype = {"tensor(float)": "float32", "tensor(uint8)": "uint8", "tensor(int8)": "int8"}[inp.type]

    def run(x):
        return sess.run(None, {inp.name: x})[0]

    return run, [int(d) if isinstance(d, int) else 1 for d in inp.shape], dtype, ort.__version__
