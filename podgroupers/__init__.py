"""Shipped PodGrouper plugins, registered through the ``kai.podgroupers`` entry-point group."""
