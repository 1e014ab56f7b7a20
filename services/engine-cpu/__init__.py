"""engine-cpu: one model on the CPU, its KV caches, the continuous-batching scheduler, numba kernels."""
