"""``elastic``: jobs below their gang size first, then jobs exactly at it, then jobs above it."""

from kai import hookimpl


class Elastic:
    name = "elastic"

    @hookimpl
    def kai_job_order(self, left, right):
        return left.elastic_state() - right.elastic_state() or None


def build(arguments):
    return Elastic()
