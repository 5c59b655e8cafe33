"""What ships to the device, exactly: the runtime bundle copies this folder's modules into its
edge_sdk_runtime/ and builds its edge-runner from runner.cc (runtime/bundle.py).

    loader.py          load a package's model.so + params.bin with libtvm_runtime through tvm_ffi; run it
    preprocess.py      image -> model input as the manifest says (crop, resize, mean/std, layout, quantize)
    eval_batch.py      score a folder of inputs in one process (edge-sdk eval on the host or a device)
    verify_package.py  check a package's sha256s and Ed25519 signature before a switch (pure Python)
    runner.cc          edge-runner (C++), with runner_profile.h (--profile) and runner_kernel.h (--kernel)

Each imports only the standard library, numpy and tvm_ffi (tests/test_architecture.py checks it), so it
runs on a Pi with python3 + python3-numpy and the bundle, on Bookworm's Python 3.11 and Trixie's 3.13
(the bundle carries tvm_ffi's extension for both); the host imports the same files from here.
"""
