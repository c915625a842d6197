"""KAI's texts for why a pod or a job was not placed: the per-pod message and the job-level ones.

Identical reasons are counted ("3 node(s) didn't have enough resources: GPUs") and the parts are
sorted, so the texts are the same as KAI's, byte for byte.
"""

from __future__ import annotations

from collections import Counter

from kai.api import Task, names

#: KAI's reason of a job fit error that names no domain and no queue, and of a job with several errors.
PLAIN_FIT_ERROR_REASON = names.REASON_POD_SCHEDULING_ERRORS
DEFAULT_FIT_ERROR_REASON = "Unable to schedule podgroup"


def _counted(counts: Counter[str]) -> str:
    """Each text once, prefixed by its count when it occurred more than once, sorted and joined KAI's way."""
    return ". \n".join(sorted(f"{n} {text}" if n > 1 else text for text, n in counts.items()))


def task_fit_message(reasons: Counter[str]) -> str:
    """KAI's message for a pod that found no node, from the count of each node's reasons (always counted)."""
    msg = "no nodes with enough resources were found"
    if reasons:
        msg += ": " + ". \n".join(sorted(f"{n} {text}" for text, n in reasons.items())) + "."
    return msg


def job_fit_message(errors: list[str]) -> str:
    """KAI's job-level message: the single error, or 'Unable to schedule podgroup' with all of them counted."""
    if not errors:
        return DEFAULT_FIT_ERROR_REASON
    if len(errors) == 1:
        return errors[0]
    return f"{DEFAULT_FIT_ERROR_REASON}: " + _counted(Counter(errors)) + "."


def job_fit_detail(details: list[tuple[str, str]]) -> str:
    """KAI's detailed job-level message (its ``--detailed-fit-errors`` form) from ``(reason, detail)`` pairs:
    the reason of the single error, or 'Unable to schedule podgroup', then every detail on a line of its own."""
    reason = details[0][0] if len(details) == 1 else DEFAULT_FIT_ERROR_REASON
    return f"\n{reason}." + "".join(sorted(f"\n{detail}." for _, detail in details))


def scheduling_conditions_message(task: Task, failures: list[tuple[str, str]]) -> str:
    """KAI's message of failed pre-predicates: ``failures`` are (predicate name, message) pairs, one line each."""
    lines = "".join(f"{name}: {message}.\n" for name, message in sorted(failures))
    return f"Scheduling conditions were not met for pod {task.namespace}/{task.name}:\n{lines}"
