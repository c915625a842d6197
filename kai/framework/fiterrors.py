"""KAI's texts for why a pod or a job was not placed: the per-pod message and the job-level ones.

Identical reasons are counted ("3 node(s) didn't have enough resources: GPUs") and the parts are
sorted, so the texts are the same as KAI's, byte for byte.
"""

from __future__ import annotations

from collections import Counter

import attrs

from kai.api import QueueDetails, Task, names

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


@attrs.frozen
class JobFitError:
    """One reason a job was not placed: KAI's unschedulable ``reason``, its short ``messages``, the
    ``detail`` of the detailed form, and structured ``details`` (the queue, for capacity vetoes)."""

    reason: str
    messages: tuple[str, ...]
    detail: str
    details: QueueDetails | None = None

    def explanation(self) -> tuple[str, str, QueueDetails | None]:
        """(reason, message, details) of a PodGroup's ``schedulingConditions[].reasons[]`` entry."""
        return self.reason, ", ".join(self.messages), self.details


def job_fit_message(errors: list[JobFitError]) -> str:
    """KAI's job-level message: the single error's reason, or 'Unable to schedule podgroup', then every
    message (counted when repeated)."""
    reason = errors[0].reason if len(errors) == 1 else DEFAULT_FIT_ERROR_REASON
    messages = Counter(m for e in errors for m in e.messages)
    if messages:
        reason += ": " + _counted(messages) + "."
    return reason


def job_fit_detail(errors: list[JobFitError]) -> str:
    """KAI's detailed job-level message (its ``--detailed-fit-errors`` form): the reason of the single error,
    or 'Unable to schedule podgroup', then every detail on a line of its own."""
    reason = errors[0].reason if len(errors) == 1 else DEFAULT_FIT_ERROR_REASON
    return f"\n{reason}." + "".join(sorted(f"\n{e.detail}." for e in errors))


def scheduling_conditions_message(task: Task, failures: list[tuple[str, str]]) -> str:
    """KAI's message of failed pre-predicates: ``failures`` are (predicate name, message) pairs, one line each."""
    lines = "".join(f"{name}: {message}.\n" for name, message in sorted(failures))
    return f"Scheduling conditions were not met for pod {task.namespace}/{task.name}:\n{lines}"
