"""Podgroupers for pods without owners: one PodGroup per pod, or one per Spark application."""

from __future__ import annotations

from kai.sdk import hookimpl, labels

SPARK_APP_NAME_LABEL = "spark-app-name"
SPARK_APP_SELECTOR_LABEL = "spark-app-selector"


def is_spark_pod(pod) -> bool:
    """A Spark driver or executor: it carries both ``spark-app-name`` and ``spark-app-selector``."""
    pod_labels = labels(pod)
    return SPARK_APP_NAME_LABEL in pod_labels and SPARK_APP_SELECTOR_LABEL in pod_labels


def spark_metadata(hub, top_owner, pod):
    """The default rules, with the PodGroup named after the Spark application (``spark-app-selector``)."""
    metadata = hub.default_metadata(top_owner, pod)
    metadata.name = labels(pod).get(SPARK_APP_SELECTOR_LABEL, "")
    return metadata


class PodJobGrouper:
    """A bare pod is its own top owner: PodGroup ``pg-<pod>-<uid>``, or its Spark application's PodGroup."""

    @hookimpl
    def kai_podgrouper_kinds(self):
        return [("", "v1", "Pod")]

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        if is_spark_pod(pod):
            return spark_metadata(hub, top_owner, pod)
        return hub.default_metadata(top_owner, pod)


class SparkGrouper:
    """Spark pods share the PodGroup named by their ``spark-app-selector`` label (claims no kind)."""

    @hookimpl
    def kai_podgroup_metadata(self, hub, top_owner, pod, owners):
        return spark_metadata(hub, top_owner, pod)


def build_podjob(arguments):
    return PodJobGrouper()


def build_spark(arguments):
    return SparkGrouper()
