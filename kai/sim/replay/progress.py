"""The progress bar of a replay run from a terminal."""

from __future__ import annotations

import sys


def progress_bar(total: int, wanted: bool):
    """A progress bar on stderr when asked and tqdm is installed (the ``progress`` extra)."""
    if not wanted or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="pod", file=sys.stderr)
