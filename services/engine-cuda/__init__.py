"""engine-cuda: the engine worker on one GPU: numba-cuda kernels (kernels.py) behind the backend interface (backend.py)."""
