"""KAI's order of two sibling queues (proportion plugin's DRF comparison), compiled.

Twin of ``kai._native.queueorder_py`` (whose docstring describes the inputs and the rules): same
function, same results. Vectors are read from any sequence of numbers, at most 16 resources.
"""

cdef enum:
    MAX_RESOURCES = 16

cdef double UNLIMITED = -1.0
cdef double ZERO_SHARE_MULTIPLIER = 1000.0
LEFT, TIE, RIGHT = -1, 0, 1


def compare(l_fair, l_allocated, l_request, l_victims, l_deserved, l_limit, double l_priority,
            r_fair, r_allocated, r_request, r_victims, r_deserved, r_limit, double r_priority, totals):
    """-1 when the left queue goes first, 1 when the right one does, 0 on a tie."""
    cdef Py_ssize_t n = len(totals), r
    if n > MAX_RESOURCES:
        raise ValueError(f"at most {MAX_RESOURCES} resources, got {n}")
    cdef double lf[MAX_RESOURCES], la[MAX_RESOURCES], lw[MAX_RESOURCES], lm[MAX_RESOURCES]
    cdef double ld[MAX_RESOURCES], ll[MAX_RESOURCES], lx[MAX_RESOURCES]
    cdef double rf[MAX_RESOURCES], ra[MAX_RESOURCES], rw[MAX_RESOURCES], rm[MAX_RESOURCES]
    cdef double rd[MAX_RESOURCES], rl[MAX_RESOURCES], rx[MAX_RESOURCES]
    cdef double tot[MAX_RESOURCES]
    for r in range(n):
        lf[r] = l_fair[r]
        la[r] = l_allocated[r]
        lw[r] = la[r] + <double>l_request[r]
        lm[r] = lw[r] if l_victims is None else lw[r] - <double>l_victims[r]
        ld[r] = l_deserved[r]
        ll[r] = l_limit[r]
        rf[r] = r_fair[r]
        ra[r] = r_allocated[r]
        rw[r] = ra[r] + <double>r_request[r]
        rm[r] = rw[r] if r_victims is None else rw[r] - <double>r_victims[r]
        rd[r] = r_deserved[r]
        rl[r] = r_limit[r]
        tot[r] = totals[r]
    return _compare(n, lf, la, lw, lm, ld, ll, lx, l_priority, rf, ra, rw, rm, rd, rl, rx, r_priority, tot)


cdef int _compare(Py_ssize_t n, double* lf, double* la, double* lw, double* lm, double* ld, double* ll, double* lx,
                  double lp, double* rf, double* ra, double* rw, double* rm, double* rd, double* rl, double* rx,
                  double rp, double* tot) noexcept nogil:
    cdef Py_ssize_t r
    cdef bint lflag = True, rflag = True
    cdef int result
    cdef double lshare, rshare
    # 1. above fair share in every resource goes last
    for r in range(n):
        if not lf[r] < la[r]:
            lflag = False
        if not rf[r] < ra[r]:
            rflag = False
    result = _prefer(not lflag, not rflag)
    if result:
        return result
    # 2. within deserved with the job goes first
    lflag, rflag = True, True
    for r in range(n):
        if not _leq(lw[r], ld[r]):
            lflag = False
        if not _leq(rw[r], rd[r]):
            rflag = False
    result = _prefer(lflag, rflag)
    if result:
        return result
    # 3. priority
    if lp != rp:
        return -1 if lp > rp else 1
    # 4. zero allocatable share of a used resource goes last
    lflag, rflag = False, False
    for r in range(n):
        lx[r] = _allocatable(ld[r], lf[r], ll[r])
        rx[r] = _allocatable(rd[r], rf[r], rl[r])
        if lx[r] == 0 and lw[r] > 0:
            lflag = True
        if rx[r] == 0 and rw[r] > 0:
            rflag = True
    result = _prefer(not lflag, not rflag)
    if result:
        return result
    # 5., 6. dominant resource share with the job (minus victims), then without it
    lshare, rshare = _dominant(n, lm, lx, tot), _dominant(n, rm, rx, tot)
    if lshare != rshare:
        return -1 if lshare < rshare else 1
    lshare, rshare = _dominant(n, la, lx, tot), _dominant(n, ra, rx, tot)
    if lshare != rshare:
        return -1 if lshare < rshare else 1
    # 7. strictly smaller allocatable-share vector
    lflag, rflag = True, True
    result = 0
    for r in range(n):
        if lx[r] != rx[r]:
            result = 1
        if not _leq(lx[r], rx[r]):
            lflag = False
        if not _leq(rx[r], lx[r]):
            rflag = False
    if result:
        if lflag:
            return -1
        if rflag:
            return 1
    return 0


cdef inline int _prefer(bint left_flag, bint right_flag) noexcept nogil:
    if left_flag and not right_flag:
        return -1
    if right_flag and not left_flag:
        return 1
    return 0


cdef inline bint _leq(double a, double b) noexcept nogil:
    if a == UNLIMITED:
        return b == UNLIMITED
    return b == UNLIMITED or a <= b


cdef inline double _allocatable(double deserved, double fair, double limit) noexcept nogil:
    cdef double value
    if deserved == UNLIMITED:
        return limit
    value = deserved if deserved >= fair else fair
    if limit == UNLIMITED:
        return value
    return limit if limit < value else value


cdef double _dominant(Py_ssize_t n, double* allocated, double* allocatable, double* tot) noexcept nogil:
    cdef double share = 0.0, alloc, value
    cdef Py_ssize_t r
    for r in range(n):
        alloc = tot[r] if allocatable[r] == UNLIMITED else allocatable[r]
        value = allocated[r] * ZERO_SHARE_MULTIPLIER if alloc == 0 else allocated[r] / alloc
        if value > share:
            share = value
    return share
