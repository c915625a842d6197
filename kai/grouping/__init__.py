"""Pod grouping: the hub that turns a pod into its PodGroup through the podgroupers, and its helpers."""
