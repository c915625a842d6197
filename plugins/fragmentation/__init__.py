"""``fragmentation``: place each task where it least raises the node's expected GPU fragmentation.

The idea is Fragmentation Gradient Descent (Weng et al., USENIX ATC'23). :mod:`.measure` is the node's
fragmentation for a workload of task shapes, :mod:`.kernel` the same measure run by the compiled
``kai._native.fragment``, and :mod:`.plugin` the plugin: the workload it learns or is given, and the node
and device scores.
"""
