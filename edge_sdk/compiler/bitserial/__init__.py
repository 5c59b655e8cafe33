"""The bitserial backend (1-3 bit weights and activations): kernels, the network graph, LCE models.

    backend.py  lower_bitserial / compile_binarized: BinarizedNet -> Relax VM executable, layer rows
    graph.py    emit_network: a BinarizedNet as a Relax module (call_tir to the kernels)
    lce.py      emit_lce / lower_lce: an imported Larq Compute Engine graph on the same kernels
    kernels.py  the bitserial conv2d/dense TE computes (ConvSpec, bitpack, bipolar terms) and build helpers
    schedule.py their schedules per architecture (CpuSchedule; network_word)
    popc.py     the unipolar popcount kernel
    io.py       pack/unpack and unfused glue kernels
    stem.py     the integer stem kernel (int8 conv onto a-bit codes, max pool, bitpack)
"""
