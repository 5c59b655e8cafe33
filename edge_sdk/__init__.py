"""edge-sdk: compile image classifiers with TVM for Raspberry Pis, ship them, run and compare them.

Lifecycle (one object per stage):
    Model (models/)  -> CompiledModel (compiler/)  -> Package (package.py, .edgepkg)
    -> RunResult (runtime/, on the host, under qemu, or on a device)
"""
__version__ = "0.1.0"
