"""Our TE computes + s_tir schedules, one module per op family (float: conv2d, depthwise, pool;
fuse.py plugs them into a Relax graph; the 1-3 bit kernels are compiler/bitserial/)."""
