"""Writing KAI's operator conditions on an object: once per change, and never in the way of the component."""

from __future__ import annotations

import logging

from kai.api import names
from kai.kube.client import object_path
from kai.kube.operatorstatus import report_status
from support.kube import FakeApi

CONFIG = object_path(*names.CONFIGS, name=names.KAI_CONFIG_NAME)


def config(generation: int) -> dict:
    return {"apiVersion": "kai.scheduler/v1", "kind": "Config",
            "metadata": {"name": names.KAI_CONFIG_NAME, "generation": generation}, "spec": {}}


def test_conditions_are_written_once_per_generation_and_outcome():
    kube = FakeApi()
    kube.add(CONFIG, config(1))
    report_status(kube, names.CONFIGS, config(1), None)
    report_status(kube, names.CONFIGS, config(1), None)
    assert kube.paths("PATCH") == [f"{CONFIG}/status"]
    report_status(kube, names.CONFIGS, config(2), "Config kai-config: spec.x: bad")
    assert len(kube.paths("PATCH")) == 2
    deployed = next(c for c in kube.objects[CONFIG]["status"]["conditions"] if c["type"] == "Deployed")
    assert (deployed["status"], deployed["observedGeneration"]) == ("False", 2)
    assert deployed["message"] == "not applied: Config kai-config: spec.x: bad"


def test_a_status_that_cannot_be_written_is_logged(caplog):
    kube = FakeApi()
    kube.add(CONFIG, config(1))
    kube.fail(403, "Forbidden", "PATCH", "/status")
    with caplog.at_level(logging.WARNING):
        report_status(kube, names.CONFIGS, config(1), None)
    (record,) = caplog.records
    assert "cannot report the status" in record.getMessage() and "403" in str(vars(record))
