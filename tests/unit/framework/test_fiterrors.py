"""KAI's fit-error texts: reasons counted, sorted and joined as KAI joins them."""

from __future__ import annotations

from collections import Counter

from kai.framework.fiterrors import JobFitError, job_fit_detail, job_fit_message, task_fit_message


def test_task_message_counts_and_sorts_the_reasons():
    reasons = Counter({"node(s) didn't have enough resources: GPUs": 3, "node(s) pod number exceeded": 1})
    assert task_fit_message(reasons) == ("no nodes with enough resources were found: "
                                         "1 node(s) pod number exceeded. \n"
                                         "3 node(s) didn't have enough resources: GPUs.")
    assert task_fit_message(Counter()) == "no nodes with enough resources were found"


def error(reason, *messages, detail=None):
    return JobFitError(reason, messages, detail or ", ".join(messages))


def test_job_message_is_the_single_errors_reason_or_the_default_then_every_message_counted():
    assert job_fit_message([]) == "Unable to schedule podgroup"
    assert job_fit_message([error("OverLimit", "queue q is full")]) == "OverLimit: queue q is full."
    assert job_fit_message([error("A", "b", "a"), error("B", "b")]) == "Unable to schedule podgroup: 2 b. \na."


def test_job_detail_names_the_single_reason_or_the_default_one():
    detail = job_fit_detail([error("WorkloadTopology", "short", detail="rack r1 lacks 2 GPUs")])
    assert detail == "\nWorkloadTopology.\nrack r1 lacks 2 GPUs."
    assert job_fit_detail([error("A", "y"), error("B", "x")]) == "\nUnable to schedule podgroup.\nx.\ny."
