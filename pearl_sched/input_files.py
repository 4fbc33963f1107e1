"""Reading files a user hands us: one clear error per problem, never a hang, a traceback or the file's contents.

Every reader of user input (plan requests, scenarios, profiles) goes through :func:`read_bytes` /
:func:`read_text`, which

- open the path without blocking (``O_NONBLOCK``) and refuse anything but a regular file, so a FIFO, a socket
  or a device such as ``/dev/zero`` is an error, never a hang or an endless read;
- refuse files over a size limit (:data:`MAX_DOCUMENT_BYTES` for JSON documents, :data:`MAX_PROFILE_BYTES` for
  profile measurements), naming the limit;
- recognise gzip, zip, UTF-16 and other binary content and say so, and decode UTF-8 strictly, naming the line
  of the first bad byte.

Errors are :class:`InputFileError`: one line, ``path[:row] [column]: problem``, with no text from the file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from pearl_sched.errors import PearlSchedError

MAX_DOCUMENT_BYTES = 16 * 2**20
"""Largest plan request, plan or scenario file read (16 MiB). A plan request for 4,096 GPUs in 2,048 TP2
workers is 1.4 MiB of indented JSON and validates in 0.08 s (docs/reliability.md): an 11× margin, while the
parse of a document at the limit, which holds it in memory several times over, stays about a second."""

MAX_PROFILE_BYTES = 256 * 2**20
"""Largest profile measurement file read (256 MiB): an SGLang request log of about 400,000 requests at the
~600 bytes a ``/generate`` response's ``meta_info`` takes. The readers hold a file's rows in memory, about ten
times its size."""

_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed: decompress it first"),
    (b"PK\x03\x04", "a zip archive, not text"),
    (b"\xff\xfe", "UTF-16 text: save it as UTF-8"),
    (b"\xfe\xff", "UTF-16 text: save it as UTF-8"),
    (b"BZh", "bzip2-compressed: decompress it first"),
    (b"\xfd7zXZ\x00", "xz-compressed: decompress it first"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it first"),
)
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(PearlSchedError, ValueError):
    """A file that cannot be read as the input it should be; the message names the file, row and column.

    Attributes:
        path: The file.
        row: The 1-based line or row of the problem, when there is one.
        column: The column or field of the problem, when there is one.
        problem: The message without the location.
    """

    def __init__(self, path: object, problem: str, *, row: int | None = None, column: str | None = None) -> None:
        """Format ``path[:row] [column]: problem`` and keep the parts as attributes."""
        where = str(path)
        if row is not None:
            where += f":{row}"
        if column is not None:
            where += f" [{column}]"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.row = row
        self.column = column
        self.problem = problem


def _describe_size(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.0f} MiB" if n_bytes >= 2**20 else f"{n_bytes} bytes"


def read_bytes(path: str | Path, *, limit_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``limit_bytes``.

    Raises:
        InputFileError: The path is missing or unreadable, is not a regular file (a directory, FIFO, device or
            socket: checked on the open descriptor, which is opened without blocking), or is larger than the limit.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO with no writer on some systems
            raise InputFileError(path, "not a regular file") from None
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        for test, kind in _KINDS:
            if test(info.st_mode):
                raise InputFileError(path, f"is {kind}, not a regular file")
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(path, "not a regular file")
        if info.st_size > limit_bytes:
            raise InputFileError(
                path, f"is {_describe_size(info.st_size)}, over the {_describe_size(limit_bytes)} limit for this input"
            )
        chunks = []
        total = 0
        while chunk := os.read(fd, min(1 << 20, limit_bytes + 1 - total) or 1):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit_bytes:  # grew while we read
                raise InputFileError(path, f"is over the {_describe_size(limit_bytes)} limit for this input")
        return b"".join(chunks)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def decode_text(path: str | Path, data: bytes) -> str:
    """``data`` decoded as UTF-8 text (a UTF-8 byte-order mark is dropped).

    Raises:
        InputFileError: The bytes are compressed, an archive, UTF-16, contain NUL bytes, or are not valid UTF-8
            (the message names the line of the first bad byte, not the byte).
    """
    for magic, what in _MAGIC:
        if data.startswith(magic):
            raise InputFileError(path, f"is {what}")
    nul = data.find(b"\x00", 0, 1 << 16)
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise InputFileError(path, "contains NUL bytes: a binary file (or UTF-16 without a byte-order mark)", row=line)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFileError(path, f"is not UTF-8 text (bad byte at offset {exc.start})", row=line) from None


def read_text(path: str | Path, *, limit_bytes: int) -> str:
    """The UTF-8 text of a regular file of at most ``limit_bytes`` (see :func:`read_bytes`, :func:`decode_text`)."""
    return decode_text(path, read_bytes(path, limit_bytes=limit_bytes))
