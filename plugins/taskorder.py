"""``taskorder``: tasks with the ``kai.scheduler/task-priority`` label first, higher values first.

A task whose label does not parse as an integer is ordered after the ones that do.
"""

from kai.sdk import TASK_PRIORITY_LABEL, hookimpl


def task_priority(task):
    """The task's priority: its own ``priority`` field, else the label; None when absent or unparsable."""
    if task.priority is not None:
        return task.priority
    value = task.labels.get(TASK_PRIORITY_LABEL)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class TaskOrder:
    name = "taskorder"

    @hookimpl
    def kai_task_order(self, left, right):
        lp, rp = task_priority(left), task_priority(right)
        if lp == rp:
            return None
        if lp is None:
            return 1
        if rp is None:
            return -1
        return rp - lp


def build(arguments):
    return TaskOrder()
