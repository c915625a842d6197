"""``kai-scaling-pod``: the program of the node scale adjuster's scaling pods (KAI's ``cmd/scalingpod``).

A scaling pod only has to be scheduled: the autoscaler adds a node for it, and once it runs it is
done. The program returns at once with exit code 0, so that the pod completes and frees the GPUs it
asked for; the adjuster then deletes it.
"""

from __future__ import annotations


def main() -> int:
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
