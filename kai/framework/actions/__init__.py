"""The scheduling actions shipped with the kernel: allocate (and later consolidation, reclaim, preempt, stalegangeviction)."""
