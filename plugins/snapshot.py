"""``snapshot``: the scheduler serves ``GET /get-snapshot`` -- the cluster it schedules, in KAI's snapshot format
(a zip holding ``snapshot.json``), for ``kai-scheduler simulate --kai-snapshot`` or KAI's ``snapshot-tool``.

The plugin takes no part in a session; the scheduler serves the snapshot on its metrics address while the
plugin is configured (:mod:`kai.scheduler.kaisnapshot`).
"""


class Snapshot:
    name = "snapshot"


def build(arguments):
    return Snapshot()
