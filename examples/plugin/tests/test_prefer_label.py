"""The installed plugin, found by its entry-point name, through the real kernel (``kai.testing``)."""

import pytest
from kai_prefer_label import build

from kai import testing as kt


def snapshot():
    return kt.cluster(
        nodes=[kt.node("a1", gpus=2, labels={"zone": "a"}), kt.node("b1", gpus=8, labels={"zone": "b"})],
        jobs=[kt.job("train", queue="q", tasks=2, gpus=1)],
    )


def test_bin_packing_alone_fills_the_smaller_node():
    session = kt.run(snapshot(), plugins=["predicates", "nodeplacement"])
    assert kt.placements(session) == {"train-0": "a1", "train-1": "a1"}


def test_the_plugin_moves_the_job_to_the_labelled_node():
    plugins: list[str | kt.PluginSpec] = ["predicates", kt.PluginSpec("preferlabel", {"label": "zone=b"}),
                                          "nodeplacement"]
    assert kt.placements(kt.run(snapshot(), plugins=plugins)) == {"train-0": "b1", "train-1": "b1"}


def test_the_label_argument_is_key_equals_value():
    with pytest.raises(ValueError, match="key=value"):
        build({"label": "zone"})
