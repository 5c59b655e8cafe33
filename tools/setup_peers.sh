#!/usr/bin/env bash
# Create (idempotently) the Larq Compute Engine venv the bench's --peers runs LCE in, then write the
# peer models (tools/make_peer_models.py) into $EDGE_SDK_CACHE/peers/.
#
# Why a venv of its own: TensorFlow 2.16.1 + larq 0.13.3 + larq-compute-engine 0.16.0 need numpy<2 and
# protobuf<3.21; the project venv has numpy 2.x and ONNX Runtime needs a newer protobuf. LiteRT and
# ONNX Runtime run in the project venv (.venv). The TF venv (tools/setup_tf_env.sh) exports ONNX.
#
#   bash tools/setup_peers.sh                  # venv-lce + venv-tf + all peer models
#   bash tools/setup_peers.sh --print-python   # the LCE venv's python
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${EDGE_SDK_CACHE:-$HOME/.cache/edge-sdk}"
VENV="$CACHE/venv-lce"
PY="${EDGE_SDK_TF_PYTHON:-python3.11}"   # TF 2.16.1 wheels exist for CPython 3.9-3.12

PKGS=(
  "tensorflow==2.16.1"
  "tf-keras==2.16.0"     # larq builds Keras 2 models (TF_USE_LEGACY_KERAS=1)
  "larq==0.13.3"
  "larq-compute-engine==0.16.0"
  "numpy<2"
  "protobuf<3.21"
)
STAMP="$VENV/.edge-sdk-pkgs"
WANT="$(printf '%s\n' "${PKGS[@]}")"

if [[ "${1:-}" == "--print-python" ]]; then
  echo "$VENV/bin/python"
  exit 0
fi

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" && -x "$VENV/bin/python" ]]; then
  echo "venv-lce up to date: $VENV"
else
  command -v "$PY" >/dev/null || { echo "error: $PY not found (set EDGE_SDK_TF_PYTHON)" >&2; exit 2; }
  mkdir -p "$CACHE"
  [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet "${PKGS[@]}"
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/python" - <<'PYEOF'
import numpy, google.protobuf, larq, larq_compute_engine as lce, tensorflow as tf
assert numpy.__version__.startswith("1."), numpy.__version__
print("tensorflow", tf.__version__, "larq", larq.__version__, "lce", lce.__version__,
      "numpy", numpy.__version__, "protobuf", google.protobuf.__version__)
PYEOF
  # The stamp last (via a temp name), so an interrupted install is retried next time.
  printf '%s\n' "${PKGS[@]}" > "$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
  echo "venv-lce ready: $VENV"
fi

bash tools/setup_tf_env.sh
[[ -x .venv/bin/python ]] || { echo "error: .venv missing (run tools/setup.sh first)" >&2; exit 2; }
.venv/bin/python tools/make_peer_models.py
