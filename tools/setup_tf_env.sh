#!/usr/bin/env bash
# Create (idempotently) the separate virtualenv that tools/make_test_models.py runs in.
#
# Why separate: TensorFlow 2.16 needs numpy<2, the project venv has numpy 2.x, and TF is far too
# heavy for CI. CI only reads the .tflite/.onnx files committed under tests/data/.
#
#   bash tools/setup_tf_env.sh          # creates $EDGE_SDK_CACHE/venv-tf (default ~/.cache/edge-sdk)
#   "$(bash tools/setup_tf_env.sh --print-python)" tools/make_test_models.py
set -euo pipefail

CACHE="${EDGE_SDK_CACHE:-$HOME/.cache/edge-sdk}"
VENV="$CACHE/venv-tf"
PY="${EDGE_SDK_TF_PYTHON:-python3.11}"   # TF 2.16.1 wheels exist for CPython 3.9-3.12

# Pinned: the README in tests/data records these versions; bump both together.
PKGS=(
  "tensorflow==2.16.1"
  "tf-keras==2.16.0"     # Keras 2 API: TFLiteConverter.from_keras_model needs it under TF 2.16
  "numpy<2"
  "torch==2.13.0"        # CPU build; only torch.onnx.export is used (ONNX test model)
  "onnx==1.17.0"         # newer onnx needs an ml_dtypes newer than TF 2.16 allows
)
STAMP="$VENV/.edge-sdk-pkgs"
WANT="$(printf '%s\n' "${PKGS[@]}")"

if [[ "${1:-}" == "--print-python" ]]; then
  echo "$VENV/bin/python"
  exit 0
fi

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$VENV/bin/python" ]]; then
  echo "venv-tf up to date: $VENV"
  exit 0
fi

command -v "$PY" >/dev/null || { echo "error: $PY not found (set EDGE_SDK_TF_PYTHON)" >&2; exit 2; }
mkdir -p "$CACHE"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# torch==2.13.0 resolves to the local CPU wheel (pip find-links) on the team's machines.
"$VENV/bin/python" -m pip install --quiet "${PKGS[@]}"
"$VENV/bin/python" - <<'PYEOF'
import numpy, tensorflow as tf, torch
assert numpy.__version__.startswith("1."), numpy.__version__
print("tensorflow", tf.__version__, "numpy", numpy.__version__, "torch", torch.__version__)
PYEOF
# Write the stamp last (via a temp name) so an interrupted install is retried next time.
printf '%s\n' "${PKGS[@]}" > "$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
echo "venv-tf ready: $VENV"
