"""engine-cuda: the engine worker on one GPU (numba-cuda kernels). Not built yet: see main.py."""
