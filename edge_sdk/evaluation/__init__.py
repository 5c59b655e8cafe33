"""Accuracy on the user's labelled images: `edge-sdk eval PKG ... --images DIR`.

    folder = scan(DIR, labels=..., classes=...)         dataset.py: ImageFolder -> samples with class indices
    result = evaluate_package(PKG, folder, where=...)   engine.py: preprocess (runtime/device/preprocess.py), run
                                                        here / under qemu / on a device, rank -> EvalResult
    record(results, db)                                 store.py: one results-store run per package
"""
