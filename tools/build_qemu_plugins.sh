#!/usr/bin/env bash
# The checkout's entry point to edge_sdk/qemu/build_plugins.sh (package data, so an installed wheel
# carries it too): builds QEMU's plugins and ours into $EDGE_SDK_CACHE/qemu-plugins/<qemu version>/.
#   bash tools/build_qemu_plugins.sh [--guest-python]
exec bash "$(cd "$(dirname "$0")/.." && pwd)/edge_sdk/qemu/build_plugins.sh" "$@"
