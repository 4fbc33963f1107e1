"""Keeping solver libraries from writing to the process's stdout."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_closed() -> Iterator[None]:
    """Send file descriptor 1 to /dev/null for the duration (C libraries write there directly)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@functools.cache
def silence_highs_banner() -> None:
    """Make the first ``Highs`` object with stdout closed, so HiGHS's banner never reaches stdout.

    HiGHS prints a copyright banner to stdout when the first ``Highs`` object is made, whatever its options;
    that would corrupt a CLI's JSON output.
    """
    import highspy

    with stdout_closed():
        highspy.Highs()  # type: ignore[no-untyped-call]
