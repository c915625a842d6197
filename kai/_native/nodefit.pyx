# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``nodefit_py``: the resource-fit and placement-score loops of allocate.

The arguments are ``array.array`` objects, read through their data pointers: the loops run over a few
node classes per task, where taking a buffer view of every argument would cost more than the loop.
"""

from cpython cimport array

cdef double EPS = 1e-9


cdef inline double* _doubles(array.array a, Py_ssize_t n) except? NULL:
    if a.ob_descr.typecode != b'd' or len(a) < n:
        raise ValueError(f"expected an array('d') of at least {n} items")
    return a.data.as_doubles


def fit_nodes(array.array idle_cpu, array.array idle_mem, array.array idle_gpu, array.array idle_pods,
              array.array rel_cpu, array.array rel_mem, array.array rel_gpu, array.array rel_pods,
              array.array candidates, double cpu, double mem, double gpu, double pods, array.array out):
    """Write 0 (does not fit idle + releasing), 2 (fits idle too) or 1 per candidate into ``out``; return the count
    that fit."""
    cdef Py_ssize_t k, n = len(candidates), nodes = len(idle_cpu)
    if candidates.ob_descr.typecode != b'i' or out.ob_descr.typecode != b'b' or len(out) < n:
        raise ValueError("candidates must be an array('i') and out an array('b') at least as long")
    cdef int* cand = candidates.data.as_ints
    cdef signed char* res = out.data.as_schars
    cdef double* ic = _doubles(idle_cpu, nodes)
    cdef double* im = _doubles(idle_mem, nodes)
    cdef double* ig = _doubles(idle_gpu, nodes)
    cdef double* ip = _doubles(idle_pods, nodes)
    cdef double* rc = _doubles(rel_cpu, nodes)
    cdef double* rm = _doubles(rel_mem, nodes)
    cdef double* rg = _doubles(rel_gpu, nodes)
    cdef double* rp = _doubles(rel_pods, nodes)
    cdef int i, fitting = 0
    for k in range(n):
        i = cand[k]
        if i < 0 or i >= nodes:
            raise IndexError(f"candidate {i} is not a node position")
        if (cpu <= ic[i] + rc[i] + EPS and mem <= im[i] + rm[i] + EPS
                and gpu <= ig[i] + rg[i] + EPS and pods <= ip[i] + rp[i] + EPS):
            fitting += 1
            if cpu <= ic[i] + EPS and mem <= im[i] + EPS and gpu <= ig[i] + EPS and pods <= ip[i] + EPS:
                res[k] = 2
            else:
                res[k] = 1
        else:
            res[k] = 0
    return fitting


def placement_scores(array.array non_allocated_array, array.array totals_array, bint spread,
                     double max_score, array.array out_array):
    """Binpack or spread score per node by one resource (see the pure twin for the formula)."""
    cdef Py_ssize_t k, n = len(non_allocated_array)
    cdef double* non_allocated = _doubles(non_allocated_array, n)
    cdef double* totals = _doubles(totals_array, n)
    cdef double* out = _doubles(out_array, n)
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
