"""``kubeflow`` and ``ray``: a training job's master or launcher, and a Ray head, are placed first."""

from kai.sdk import hookimpl


class RoleFirst:
    """Tasks whose label ``key`` has one of ``values`` go before the others of their job."""

    def __init__(self, name, key, values):
        self.name, self.key, self.values = name, key, frozenset(values)

    @hookimpl
    def kai_task_order(self, left, right):
        lf = left.labels.get(self.key) in self.values
        rf = right.labels.get(self.key) in self.values
        return (rf - lf) or None


def build_kubeflow(arguments):
    return RoleFirst("kubeflow", "training.kubeflow.org/job-role", ("master", "launcher"))


def build_ray(arguments):
    return RoleFirst("ray", "ray.io/node-type", ("head",))
