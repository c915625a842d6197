# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twin of ``fragment_py``: the expected GPU fragmentation of a node over a workload of shapes.

The workload is copied into C arrays once; a call fills one scratch row per need and sums over the shapes
in order. Floor division repeats Python's (``fmod`` based) so that every number matches the twin's.
"""

from libc.math cimport copysign, floor, fmod
from libc.stdlib cimport free, malloc

cdef double EPS = 1e-9

WHOLE, MIG, FRACTION, GPU_MEMORY = 0, 1, 2, 3


cdef inline double _floordiv(double vx, double wx):
    """Python's ``vx // wx`` for floats."""
    cdef double mod = fmod(vx, wx)
    cdef double div = (vx - mod) / wx
    cdef double result
    if mod and (wx < 0) != (mod < 0):
        div -= 1.0
    if div:
        result = floor(div)
        if div - result > 0.5:
            result += 1.0
    else:
        result = copysign(0.0, vx / wx)
    return result


cdef class Measure:
    """The measure for one workload; call it with a node's free amounts."""

    cdef int n_needs, n_shapes
    cdef int* kind
    cdef double* amount
    cdef double* slices
    cdef list profiles
    cdef int* need
    cdef double* p
    cdef double* pl
    cdef double* ps
    cdef double* c
    cdef double* m
    cdef list models
    cdef double* now
    cdef double* count
    cdef double* per_task
    cdef double* fitting
    cdef char* possible
    cdef readonly double lookahead
    cdef readonly double stranded

    def __cinit__(self, needs, shapes, double lookahead, double stranded=0.0):
        self.n_needs, self.n_shapes = len(needs), len(shapes)
        cdef int nn = max(self.n_needs, 1), ns = max(self.n_shapes, 1)
        self.kind = <int*>malloc(nn * sizeof(int))
        self.amount = <double*>malloc(nn * sizeof(double))
        self.slices = <double*>malloc(nn * sizeof(double))
        self.now = <double*>malloc(nn * sizeof(double))
        self.count = <double*>malloc(nn * sizeof(double))
        self.per_task = <double*>malloc(nn * sizeof(double))
        self.fitting = <double*>malloc(nn * sizeof(double))
        self.possible = <char*>malloc(nn * sizeof(char))
        self.need = <int*>malloc(ns * sizeof(int))
        self.p = <double*>malloc(ns * sizeof(double))
        self.pl = <double*>malloc(ns * sizeof(double))
        self.ps = <double*>malloc(ns * sizeof(double))
        self.c = <double*>malloc(ns * sizeof(double))
        self.m = <double*>malloc(ns * sizeof(double))
        if not (self.kind and self.amount and self.slices and self.now and self.count and self.per_task
                and self.fitting and self.possible and self.need and self.p and self.pl and self.ps and self.c
                and self.m):
            raise MemoryError()

    def __init__(self, needs, shapes, double lookahead, double stranded=0.0):
        cdef int k
        self.lookahead = lookahead
        self.stranded = stranded
        self.profiles = []
        for k, (kind, amount, slices) in enumerate(needs):
            self.kind[k] = kind
            self.profiles.append(amount if kind == MIG else None)
            self.amount[k] = 0.0 if kind == MIG else amount
            self.slices[k] = slices if kind == MIG else 0.0
        self.models = []
        for k, (index, p, c, m, models) in enumerate(shapes):
            if not 0 <= index < self.n_needs:
                raise ValueError(f"shape names need {index}, not one of the {self.n_needs} given")
            self.need[k] = index
            self.p[k] = p
            self.pl[k] = <double>p * lookahead
            self.ps[k] = <double>p * stranded
            self.c[k] = c
            self.m[k] = m
            self.models.append(frozenset(models) or None)

    def __dealloc__(self):
        free(self.kind)
        free(self.amount)
        free(self.slices)
        free(self.now)
        free(self.count)
        free(self.per_task)
        free(self.fitting)
        free(self.possible)
        free(self.need)
        free(self.p)
        free(self.pl)
        free(self.ps)
        free(self.c)
        free(self.m)

    def __call__(self, double whole, tuple slivers, tuple mig, double mig_gpus, str model, double cpu,
                 double memory, double device_memory):
        """The node's expected fragmentation in GPUs (see ``fragment_py.Measure.__call__``)."""
        cdef Py_ssize_t n_slivers = len(slivers), j
        cdef double sliver_sum = 0.0, total, f, smallest, small, tasks, cnt, out = 0.0, s
        cdef double la = self.lookahead
        cdef int k, kind
        cdef double sl[64]
        cdef double* sv = sl
        if n_slivers > 64:
            sv = <double*>malloc(n_slivers * sizeof(double))
            if not sv:
                raise MemoryError()
        try:
            for j in range(n_slivers):
                sv[j] = slivers[j]
                sliver_sum += sv[j]
            total = whole + sliver_sum + mig_gpus
            if total <= EPS:
                return 0.0
            for k in range(self.n_needs):
                kind = self.kind[k]
                self.possible[k] = 1
                self.fitting[k] = 0.0
                if kind == 0:  # WHOLE
                    self.now[k] = total - whole if whole >= self.amount[k] - EPS else total
                    self.count[k] = _floordiv(whole, self.amount[k])
                    self.per_task[k] = self.amount[k]
                elif kind == 1:  # MIG
                    cnt = 0.0
                    for profile, n in mig:
                        if profile == self.profiles[k]:
                            cnt = n
                            break
                    self.now[k] = total - self.slices[k] * cnt if cnt >= 1 else total
                    self.count[k] = cnt
                    self.per_task[k] = self.slices[k]
                else:
                    if kind == 2:  # FRACTION
                        f = self.amount[k]
                    else:
                        f = self.amount[k] / device_memory if device_memory else 2.0
                    if f > 1 + EPS:
                        self.possible[k] = 0
                        continue
                    smallest = f - EPS
                    small = 0.0
                    for j in range(n_slivers):
                        if sv[j] < smallest:
                            small += sv[j]
                    self.now[k] = total if whole < 1 - EPS and small >= sliver_sum - EPS else small + mig_gpus
                    tasks = 0.0
                    for j in range(n_slivers):
                        tasks += floor((sv[j] + EPS) / f)
                    self.count[k] = whole * floor((1 + EPS) / f) + tasks
                    self.per_task[k] = f
                    self.fitting[k] = sliver_sum - small
            cpu += EPS
            memory += EPS
            for k in range(self.n_shapes):
                j = self.need[k]
                models = self.models[k]
                if not self.possible[j] or (models is not None and model not in models):
                    out += self.p[k] * total
                    if la:
                        out += self.pl[k] * total
                    continue
                if self.c[k] <= cpu and self.m[k] <= memory:
                    out += self.p[k] * self.now[j]
                else:
                    out += self.p[k] * total
                    if self.fitting[j]:
                        out += self.ps[k] * self.fitting[j]
                if la:
                    cnt = self.count[j]
                    if self.c[k] > 0:
                        s = _floordiv(cpu, self.c[k])
                        if s < cnt:
                            cnt = s
                    if self.m[k] > 0:
                        s = _floordiv(memory, self.m[k])
                        if s < cnt:
                            cnt = s
                    if 0.0 > cnt:
                        cnt = 0.0
                    out += self.pl[k] * (total - cnt * self.per_task[j])
            return out
        finally:
            if sv is not sl:
                free(sv)
