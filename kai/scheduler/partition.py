"""The part of a cluster one scheduler serves: KAI's node pool of a SchedulingShard.

A shard with ``partitionLabelValue`` serves the nodes, queues, PodGroups and BindRequests labelled
``<key>=<value>`` (the node-pool label, :data:`~kai.api.names.NODE_POOL_LABEL` by default); the shard without
one serves those without the label, so that shards never share a node. Pods are all read: a pod counts
through its PodGroup or the node it is on. A scheduler of a labelled partition labels the BindRequests it
creates and the pods it binds with its partition (KAI's ``GetLabels`` and ``nodePoolLabelsChange``), and names
its node pool in the PodGroups' scheduling conditions.
"""

from __future__ import annotations

import attrs

from kai.api import names

#: The node pool of the partition without a label value, in PodGroup conditions and events.
DEFAULT_NODE_POOL = "default"


@attrs.frozen
class Partition:
    """The label key and value of a partition (value None: the objects without the key)."""

    key: str = names.NODE_POOL_LABEL
    value: str | None = None

    @property
    def selector(self) -> str:
        """KAI's label selector of the partition (``SchedulingNodePoolParams.GetLabelSelector``)."""
        if not self.key:
            return ""
        return f"{self.key}={self.value}" if self.value else f"!{self.key}"

    @property
    def labels(self) -> dict[str, str]:
        """The labels of the objects the partition's scheduler writes (none for the default partition)."""
        return {self.key: self.value} if self.key and self.value else {}

    @property
    def node_pool(self) -> str:
        return self.value or DEFAULT_NODE_POOL

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether an object with ``labels`` belongs to the partition."""
        if not self.key:
            return True
        return labels.get(self.key) == self.value if self.value else self.key not in labels


#: Every object, as a scheduler without shards sees the cluster.
EVERYTHING = Partition(key="")
