"""Names from the Python 3.11 standard library, for Python 3.10 (which verl, ROLL and slime run on).

Checked statically: scripts/check_py310.sh runs mypy with ``--python-version 3.10`` (docs/index.md).
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - no 3.10 interpreter in CI; mypy checks this branch

    class StrEnum(str, enum.Enum):
        """``enum.StrEnum`` of Python 3.11: members are strings and ``str(member)`` is the value."""

        def __str__(self) -> str:
            return str(self.value)


__all__ = ["StrEnum"]
