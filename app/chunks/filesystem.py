"""Chunks as files under one directory: written to a temporary name, fsync'd, renamed into place
and the directory fsync'd, so a crash leaves either no file or the whole one under its name."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from app.chunks.contract import ChunkMissing, ChunkStoreMisconfigured, ChunkStoreUnavailable

# Temporary files live beside the chunks (a rename never crosses file systems) under a name no
# chunk has; a crash leaves them behind, and the next start removes them.
_PARTIAL = ".partial"
_SETTING = "--tier-directory"
# Errors no retry fixes: the operator's directory is wrong.
_MISCONFIGURED = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR}

_T = TypeVar("_T")


class FileChunkStore:
    def __init__(self, root: Path) -> None:
        self._root = root
        # A cancelled caller cannot stop a thread mid-write; close() waits for these, so that once
        # a store is closed nothing more lands in its directory.
        self._in_threads: set[asyncio.Task[Any]] = set()

    @property
    def description(self) -> str:
        return f"filesystem {self._root}"

    def prepare(self) -> None:
        """Creates the directory and removes what a crash left half-written (start-up only)."""
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            for partial in self._root.rglob(f"*{_PARTIAL}"):
                partial.unlink(missing_ok=True)
        except OSError as exc:
            raise _translated(exc, str(self._root)) from exc

    def _path(self, name: str) -> Path:
        path = (self._root / name).resolve()
        if self._root.resolve() not in path.parents or name.endswith(_PARTIAL):
            raise ValueError(f"chunk name {name!r} escapes the chunk directory")
        return path

    async def _in_thread(self, work: Callable[..., _T], *args: object) -> _T:
        task: asyncio.Task[_T] = asyncio.ensure_future(asyncio.to_thread(work, *args))
        self._in_threads.add(task)
        task.add_done_callback(self._settled)
        return await asyncio.shield(task)

    def _settled(self, task: asyncio.Task[Any]) -> None:
        self._in_threads.discard(task)
        if not task.cancelled():
            task.exception()  # its caller may have gone; the error was theirs to see, not the loop's

    async def put(self, name: str, pieces: Sequence[bytes]) -> None:
        await self._in_thread(self._put, self._path(name), pieces)

    def _put(self, path: Path, pieces: Sequence[bytes]) -> None:
        partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}{_PARTIAL}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                for piece in pieces:
                    view = memoryview(piece)
                    while view:
                        view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(partial, path)
            _fsync_directory(path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            raise _translated(exc, str(path)) from exc

    async def get(self, name: str, offset: int, length: int) -> bytes:
        return await self._in_thread(self._get, self._path(name), offset, length)

    def _get(self, path: Path, offset: int, length: int) -> bytes:
        try:
            with open(path, "rb") as file:
                file.seek(offset)
                return file.read(length)
        except FileNotFoundError as exc:
            raise ChunkMissing(f"chunk {path.name} is not in {self._root}") from exc
        except OSError as exc:
            raise _translated(exc, str(path)) from exc

    async def delete(self, name: str) -> None:
        await self._in_thread(self._delete, self._path(name))

    def _delete(self, path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise _translated(exc, str(path)) from exc

    async def names(self, prefix: str = "") -> AsyncIterator[str]:
        found = await self._in_thread(self._names, prefix)
        for name in found:
            yield name

    def _names(self, prefix: str) -> list[str]:
        if not self._root.exists():
            return []
        return sorted(
            path.relative_to(self._root).as_posix()
            for path in self._root.rglob("*")
            if path.is_file()
            and not path.name.endswith(_PARTIAL)
            and path.relative_to(self._root).as_posix().startswith(prefix)
        )

    async def close(self) -> None:
        while self._in_threads:
            await asyncio.wait(set(self._in_threads))


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _translated(exc: OSError, where: str) -> Exception:
    if exc.errno in _MISCONFIGURED:
        return ChunkStoreMisconfigured(_SETTING, f"{where}: {exc.strerror}")
    return ChunkStoreUnavailable(f"{where}: {exc.strerror or exc}")
