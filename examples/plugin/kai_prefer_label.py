"""kai-scheduler plugin ``preferlabel``: prefer nodes that carry one label."""

from kai import hookimpl


class PreferLabel:
    """Adds ``weight`` to the score of every node labelled ``key=value``."""

    def __init__(self, key: str, value: str, weight: float):
        self.key, self.value, self.weight = key, value, weight

    @hookimpl
    def kai_node_scores(self, nodes):
        return [self.weight if n.labels.get(self.key) == self.value else 0.0 for n in nodes]


def build(arguments: dict) -> PreferLabel:
    """The plugin for its configuration ``arguments``: ``label`` (``key=value``) and ``weight`` (default 1000)."""
    key, sep, value = str(arguments.get("label", "")).partition("=")
    if not key or not sep:
        raise ValueError(f"argument 'label' must be key=value, not {arguments.get('label')!r}")
    return PreferLabel(key, value, float(arguments.get("weight", 1000)))
