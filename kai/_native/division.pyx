"""Fair-share division of one resource over a queue tree (KAI's ``resource_division``), compiled.

Twin of ``kai._native.division_py`` (whose docstring describes inputs, units and arithmetic): same
functions, same results bit for bit. Sequences that are C-contiguous buffers of ``double`` (floats)
or ``long long`` (ints) are read in place; anything else is converted with ``array.array``.
Priorities and ranks are compared as doubles, exact up to 2**53.
"""

from array import array

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.math cimport floor

ctypedef long long i64

cdef double UNLIMITED = -1.0

# Reason codes: the same numbers and texts as kai._native.division_py.
REASON_REQUESTED, REASON_LIMIT, REASON_DESERVED_ONLY, REASON_NO_WEIGHT = 0, 1, 2, 3
REASON_OVER_QUOTA, REASON_USAGE, REASON_HIGHER_PRIORITY = 4, 5, 6
REASONS = (
    "requested (got all it asked)",
    "limit",
    "deserved only: parent exhausted",
    "deserved only: over-quota weight 0",
    "over-quota weight share",
    "over-quota weight share, reduced by past usage",
    "higher-priority sibling took the rest",
)
cdef enum:
    C_REQUESTED = 0
    C_LIMIT = 1
    C_DESERVED_ONLY = 2
    C_NO_WEIGHT = 3
    C_OVER_QUOTA = 4
    C_USAGE = 5
    C_HIGHER_PRIORITY = 6


cdef struct Ctx:
    const double* deserved
    const double* limit
    const double* weight
    const i64* priority
    const double* request
    const double* usage
    const i64* rank
    double k
    double* fs
    double* share_weight
    double* left        # rounded-off fraction of a queue, valid when has_left
    char* has_left
    double* key         # sort key scratch
    double* base        # fair share after the deserved phase of the queue's level
    char* reason
    Py_ssize_t* by_priority
    Py_ssize_t* leftovers
    Py_ssize_t* tmp     # merge-sort scratch


def divide_level(double total, deserved, max_allowed, over_quota_weight, priority, request, usage, rank,
                 double k_value=0.0):
    """Divide ``total`` among one set of sibling queues; return each queue's fair share.

    Same signature and result as ``kai._native.division_py.divide_level``.
    """
    cdef Py_ssize_t n = len(deserved)
    views = _Views(n, deserved, max_allowed, over_quota_weight, priority, request, usage, rank)
    cdef Ctx c
    cdef Py_ssize_t* members
    cdef Py_ssize_t i
    scratch = _Scratch(n, 2)
    _setup(&c, views, scratch, k_value)
    members = scratch.idx
    for i in range(n):
        members[i] = i
    _sort_by_rank(&c, members, n)
    with nogil:
        _divide(&c, total, members, n)
    return [c.fs[i] for i in range(n)]


def divide_tree(double total, parent, deserved, max_allowed, over_quota_weight, priority, request, usage, rank,
                double k_value=0.0):
    """Divide ``total`` over a forest of queues level by level; return each queue's fair share.

    Same signature, result and errors as ``kai._native.division_py.divide_tree``.
    """
    return divide_tree_explained(total, parent, deserved, max_allowed, over_quota_weight, priority, request, usage,
                                 rank, k_value)[0]


def divide_tree_explained(double total, parent, deserved, max_allowed, over_quota_weight, priority, request, usage,
                          rank, double k_value=0.0):
    """``divide_tree`` plus, per queue, the reason code of the rule that bounded its fair share.

    Same signature, result and errors as ``kai._native.division_py.divide_tree_explained``.
    """
    cdef Py_ssize_t n = len(deserved)
    views = _Views(n, deserved, max_allowed, over_quota_weight, priority, request, usage, rank)
    if len(parent) != n:
        raise ValueError("parent: length differs from deserved")
    cdef const i64[::1] par = _ints(parent)
    cdef Ctx c
    scratch = _Scratch(n, 4)
    _setup(&c, views, scratch, k_value)
    # idx[0:n] nodes in creation order, then grouped: roots first, then each parent's children.
    cdef Py_ssize_t* order = scratch.idx
    cdef Py_ssize_t* grouped = scratch.idx + n
    cdef Py_ssize_t* start = scratch.idx + 2 * n    # start[p] of p's children in grouped
    cdef Py_ssize_t* count = scratch.idx + 3 * n
    cdef Py_ssize_t i, j, p, roots = 0, pos, reached, level_begin, level_end, next_end
    for i in range(n):
        order[i] = i
        count[i] = 0
    _sort_by_rank(&c, order, n)
    for j in range(n):
        i = order[j]
        p = par[i]
        if p == -1:
            roots += 1
        elif 0 <= p < n and p != i:
            count[p] += 1
        else:
            raise ValueError(f"parent[{i}] = {p} is not a queue index or -1")
    pos = roots
    for i in range(n):
        start[i] = pos
        pos += count[i]
        count[i] = 0
    roots = 0
    for j in range(n):
        i = order[j]
        p = par[i]
        if p == -1:
            grouped[roots] = i
            roots += 1
        else:
            grouped[start[p] + count[p]] = i
            count[p] += 1
    # Level by level: queues of the current level are gathered in order[level_begin:level_end].
    with nogil:
        _divide(&c, total, grouped, roots)
        for j in range(roots):
            order[j] = grouped[j]
        level_begin, level_end, reached = 0, roots, roots
        while level_begin < level_end:
            next_end = level_end
            for j in range(level_begin, level_end):
                i = order[j]
                if count[i] > 0:
                    _divide(&c, c.fs[i], grouped + start[i], count[i])
                    for p in range(count[i]):
                        order[next_end] = grouped[start[i] + p]
                        next_end += 1
            reached += next_end - level_end
            level_begin, level_end = level_end, next_end
    if reached != n:
        raise ValueError("parent links form a cycle")
    return [c.fs[i] for i in range(n)], [<int>c.reason[i] for i in range(n)]


cdef const double[::1] _doubles(values):
    cdef const double[::1] view
    if not isinstance(values, (list, tuple)):
        try:
            view = values
            return view
        except (TypeError, ValueError, BufferError):
            pass
    view = array("d", values)
    return view


cdef const i64[::1] _ints(values):
    cdef const i64[::1] view
    if not isinstance(values, (list, tuple)):
        try:
            view = values
            return view
        except (TypeError, ValueError, BufferError):
            pass
    try:
        view = array("q", values)
    except TypeError:  # e.g. integral floats
        view = array("q", [int(x) for x in values])
    return view


cdef class _Views:
    """The per-queue inputs as typed memoryviews, checked for length."""
    cdef const double[::1] deserved, limit, weight, request, usage
    cdef const i64[::1] priority, rank

    def __cinit__(self, Py_ssize_t n, deserved, max_allowed, over_quota_weight, priority, request, usage, rank):
        named = {"max_allowed": max_allowed, "over_quota_weight": over_quota_weight, "priority": priority,
                 "request": request, "usage": usage, "rank": rank}
        for name, values in named.items():
            if len(values) != n:
                raise ValueError(f"{name}: length differs from deserved")
        self.deserved = _doubles(deserved)
        self.limit = _doubles(max_allowed)
        self.weight = _doubles(over_quota_weight)
        self.priority = _ints(priority)
        self.request = _doubles(request)
        self.usage = _doubles(usage)
        self.rank = _ints(rank)


cdef class _Scratch:
    """Working memory for ``n`` queues: per-queue doubles and flags, ``idx_per_queue * n`` indices."""
    cdef double* doubles
    cdef char* flags
    cdef char* reasons
    cdef Py_ssize_t* idx
    cdef Py_ssize_t* sort_idx

    def __cinit__(self, Py_ssize_t n, Py_ssize_t idx_per_queue):
        cdef Py_ssize_t m = n if n > 0 else 1
        self.doubles = <double*>PyMem_Malloc(5 * m * sizeof(double))
        self.flags = <char*>PyMem_Malloc(m)
        self.reasons = <char*>PyMem_Malloc(m)
        self.idx = <Py_ssize_t*>PyMem_Malloc(idx_per_queue * m * sizeof(Py_ssize_t))
        self.sort_idx = <Py_ssize_t*>PyMem_Malloc(3 * m * sizeof(Py_ssize_t))
        if not (self.doubles and self.flags and self.reasons and self.idx and self.sort_idx):
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(n):
            self.doubles[i] = 0.0
            self.reasons[i] = C_REQUESTED

    def __dealloc__(self):
        PyMem_Free(self.doubles)
        PyMem_Free(self.flags)
        PyMem_Free(self.reasons)
        PyMem_Free(self.idx)
        PyMem_Free(self.sort_idx)


cdef void _setup(Ctx* c, _Views v, _Scratch s, double k_value):
    cdef Py_ssize_t n = v.deserved.shape[0]
    if n == 0:
        c.fs = s.doubles
        c.reason = s.reasons
        return
    c.deserved = &v.deserved[0]
    c.limit = &v.limit[0]
    c.weight = &v.weight[0]
    c.priority = &v.priority[0]
    c.request = &v.request[0]
    c.usage = &v.usage[0]
    c.rank = &v.rank[0]
    c.k = k_value
    c.fs = s.doubles
    c.share_weight = s.doubles + n
    c.left = s.doubles + 2 * n
    c.key = s.doubles + 3 * n
    c.base = s.doubles + 4 * n
    c.reason = s.reasons
    c.has_left = s.flags
    c.by_priority = s.sort_idx
    c.leftovers = s.sort_idx + n
    c.tmp = s.sort_idx + 2 * n


cdef void _sort_by_rank(Ctx* c, Py_ssize_t* idx, Py_ssize_t m) noexcept:
    """Sort queue indices given in index order by (rank, index)."""
    cdef Py_ssize_t j
    for j in range(m):
        c.key[idx[j]] = <double>c.rank[idx[j]]
    _merge_sort(idx, m, c.key, c.tmp)


cdef void _merge_sort(Py_ssize_t* idx, Py_ssize_t m, const double* key, Py_ssize_t* tmp) noexcept nogil:
    """Stable bottom-up merge sort of ``idx[:m]`` by ascending ``key[idx[j]]``."""
    cdef Py_ssize_t width = 1, lo, mid, hi, a, b, t
    cdef Py_ssize_t* src = idx
    cdef Py_ssize_t* dst = tmp
    cdef Py_ssize_t* swap
    while width < m:
        lo = 0
        while lo < m:
            mid = lo + width if lo + width < m else m
            hi = lo + 2 * width if lo + 2 * width < m else m
            a, b, t = lo, mid, lo
            while a < mid and b < hi:
                if key[src[b]] < key[src[a]]:
                    dst[t] = src[b]
                    b += 1
                else:
                    dst[t] = src[a]
                    a += 1
                t += 1
            while a < mid:
                dst[t] = src[a]
                a += 1
                t += 1
            while b < hi:
                dst[t] = src[b]
                b += 1
                t += 1
            lo = hi
        swap = src
        src = dst
        dst = swap
        width *= 2
    if src != idx:
        for t in range(m):
            idx[t] = src[t]


cdef inline double _requestable(Ctx* c, Py_ssize_t i) noexcept nogil:
    if c.limit[i] == UNLIMITED:
        return c.request[i]
    return c.request[i] if c.request[i] < c.limit[i] else c.limit[i]


cdef inline double _remaining_requested(Ctx* c, Py_ssize_t i) noexcept nogil:
    cdef double requestable = _requestable(c, i)
    if requestable < c.fs[i]:
        return 0.0
    return requestable - c.fs[i]


cdef inline bint _satisfied(Ctx* c, Py_ssize_t i) noexcept nogil:
    return c.request[i] <= c.fs[i] or (c.limit[i] != UNLIMITED and c.limit[i] <= c.fs[i])


cdef void _divide(Ctx* c, double total, const Py_ssize_t* members, Py_ssize_t m) noexcept nogil:
    """Add to ``c.fs`` the shares of ``members`` (in creation order) in ``total``; set their reasons."""
    cdef double remaining = total, deserved, give
    cdef Py_ssize_t j, i, begin, end, count
    cdef bint any_gain = False
    cdef i64 top = 0
    cdef char bound
    cdef Py_ssize_t* byp = c.by_priority
    for j in range(m):
        i = members[j]
        deserved = total if c.deserved[i] == UNLIMITED else c.deserved[i]
        give = deserved
        if _requestable(c, i) < deserved:
            give = _requestable(c, i)
        c.fs[i] += give
        remaining -= give
    if remaining <= 0:
        for j in range(m):
            i = members[j]
            c.reason[i] = _reason(c, i, C_DESERVED_ONLY)
        return
    for j in range(m):
        i = members[j]
        c.base[i] = c.fs[i]
    # Buckets: members stably sorted by descending priority, kept in creation order inside.
    for j in range(m):
        i = members[j]
        byp[j] = i
        c.key[i] = -<double>c.priority[i]
        c.has_left[i] = 0
    _merge_sort(byp, m, c.key, c.tmp)
    begin = 0
    while begin < m:
        end = _bucket_end(c, byp, begin, m)
        remaining = _divide_bucket(c, remaining, byp + begin, end - begin)
        begin = end
    begin = 0
    while begin < m:
        if remaining <= 0:
            break
        end = _bucket_end(c, byp, begin, m)
        count = 0
        for j in range(begin, end):
            i = byp[j]
            if c.has_left[i]:
                c.leftovers[count] = i
                c.key[i] = -c.left[i]
                count += 1
        _merge_sort(c.leftovers, count, c.key, c.tmp)
        for j in range(count):
            if remaining == 0:
                break
            give = 1.0 if not remaining < 1.0 else remaining
            c.fs[c.leftovers[j]] += give
            remaining -= give
        begin = end
    # The highest priority of a member that got over-quota: lower-priority members lost the rest to it.
    for j in range(m):
        i = members[j]
        if c.fs[i] > c.base[i] and (not any_gain or c.priority[i] > top):
            top = c.priority[i]
            any_gain = True
    for j in range(m):
        i = members[j]
        if c.weight[i] == 0:
            bound = C_NO_WEIGHT
        elif any_gain and top > c.priority[i]:
            bound = C_HIGHER_PRIORITY
        elif c.k > 0 and c.usage[i] > 0:
            bound = C_USAGE
        else:
            bound = C_OVER_QUOTA
        c.reason[i] = _reason(c, i, bound)


cdef inline char _reason(Ctx* c, Py_ssize_t i, char unsatisfied) noexcept nogil:
    """The reason of queue ``i`` once its level is divided; ``unsatisfied`` when it got less than it asks."""
    if _requestable(c, i) <= c.fs[i]:
        if c.limit[i] != UNLIMITED and c.limit[i] < c.request[i]:
            return C_LIMIT
        return C_REQUESTED
    return unsatisfied


cdef inline Py_ssize_t _bucket_end(Ctx* c, const Py_ssize_t* byp, Py_ssize_t begin, Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t end = begin + 1
    while end < m and c.priority[byp[end]] == c.priority[byp[begin]]:
        end += 1
    return end


cdef double _divide_bucket(Ctx* c, double remaining, const Py_ssize_t* bucket, Py_ssize_t m) noexcept nogil:
    """Over-quota rounds inside one priority bucket; return what is left (fractions in ``c.left``)."""
    cdef bint again
    cdef double amount, total_weight, weight_sum, nw, sw, requested, share, give, rounded
    cdef Py_ssize_t j, i
    while True:
        again = False
        amount = remaining
        total_weight = 0.0
        for j in range(m):
            i = bucket[j]
            if _remaining_requested(c, i) > 0:
                total_weight += c.weight[i]
        if total_weight == 0:
            break
        weight_sum = 0.0
        for j in range(m):
            i = bucket[j]
            if _satisfied(c, i):
                continue
            nw = c.weight[i] / total_weight
            sw = nw + c.k * (nw - c.usage[i])
            if not sw > 0.0:
                sw = 0.0
            c.share_weight[i] = sw
            weight_sum += sw
        if weight_sum == 0:
            break
        for j in range(m):
            if remaining == 0:
                break
            i = bucket[j]
            if _satisfied(c, i):
                continue
            requested = _remaining_requested(c, i)
            if c.weight[i] == 0:
                continue
            share = amount * (c.share_weight[i] / weight_sum)
            if requested <= share:
                give = requested
                c.has_left[i] = 0
            else:
                give = 0.0
                rounded = floor(share)
                if rounded > 0:
                    give = rounded
                if share - give > 0:
                    c.left[i] = share - give
                    c.has_left[i] = 1
            if give == 0:
                continue
            c.fs[i] += give
            remaining -= give
            again = again or requested < share
        if not again or remaining == 0:
            break
    return remaining
