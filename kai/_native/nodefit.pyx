# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``nodefit_py``: the resource-fit and placement-score loops of allocate."""

cdef double EPS = 1e-9


def fit_nodes(const double[:] idle_cpu, const double[:] idle_mem, const double[:] idle_gpu,
              const double[:] idle_pods, const double[:] rel_cpu, const double[:] rel_mem,
              const double[:] rel_gpu, const double[:] rel_pods, const int[:] candidates,
              double cpu, double mem, double gpu, double pods, signed char[:] out):
    """Write 0 (does not fit idle + releasing), 2 (fits idle too) or 1 per candidate into ``out``; return the count
    that fit."""
    cdef Py_ssize_t k, n = candidates.shape[0]
    cdef int i, fitting = 0
    for k in range(n):
        i = candidates[k]
        if (cpu <= idle_cpu[i] + rel_cpu[i] + EPS and mem <= idle_mem[i] + rel_mem[i] + EPS
                and gpu <= idle_gpu[i] + rel_gpu[i] + EPS and pods <= idle_pods[i] + rel_pods[i] + EPS):
            fitting += 1
            if (cpu <= idle_cpu[i] + EPS and mem <= idle_mem[i] + EPS and gpu <= idle_gpu[i] + EPS
                    and pods <= idle_pods[i] + EPS):
                out[k] = 2
            else:
                out[k] = 1
        else:
            out[k] = 0
    return fitting


def placement_scores(const double[:] non_allocated, const double[:] totals, bint spread,
                     double max_score, double[:] out):
    """Binpack or spread score per node by one resource (see the pure twin for the formula)."""
    cdef Py_ssize_t k, n = non_allocated.shape[0]
    cdef double lo = 0.0, hi = 0.0, v
    cdef bint seen = False
    if spread:
        for k in range(n):
            out[k] = max_score * non_allocated[k] / totals[k] if totals[k] > 0 else 0.0
        return
    for k in range(n):
        if totals[k] > 0:
            v = non_allocated[k]
            if not seen:
                lo = v
                hi = v
                seen = True
            elif v < lo:
                lo = v
            elif v > hi:
                hi = v
    for k in range(n):
        if totals[k] <= 0 or hi <= 0:
            out[k] = 0.0
        elif hi == lo:
            out[k] = max_score
        else:
            out[k] = max_score * (1.0 - (non_allocated[k] - lo) / (hi - lo))
