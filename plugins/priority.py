"""``priority``: jobs with a higher priority go first."""

from kai.sdk import hookimpl


class Priority:
    name = "priority"

    @hookimpl
    def kai_job_order(self, left, right):
        return right.priority - left.priority or None


def build(arguments):
    return Priority()
