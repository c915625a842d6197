"""``kai-scheduler replay``: a GPU cluster trace replayed through the kernel (``docs/replay.md``).

The modules, each importing only those listed before it: ``trace`` (the trace files and the kernel objects
a trace pod and node become), ``metric`` (the unallocated-GPU metric), ``frag`` (the FGD fragmentation
measure), ``progress`` (the progress bar), ``queues`` (the queue file of a timed replay), ``plots`` and
``out`` (what ``--out`` writes), ``inflate`` and ``timed`` (the two modes), ``sweep`` (several seeds, in
local processes or on Ray) and ``cli`` (the command).
"""
