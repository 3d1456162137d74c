"""The chunk stores' contract, the same checks on the filesystem and on a real S3 server
(S3Proxy): whole objects under fresh names, byte ranges, idempotent deletes, listing, and the
start-up probe naming the setting an operator must fix."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from app.chunks.contract import ChunkMissing, ChunkStore, ChunkStoreMisconfigured, ChunkStoreUnavailable
from app.chunks.filesystem import FileChunkStore
from app.chunks.probe import check_chunk_store
from app.chunks.s3 import S3ChunkStore, S3Location
from app.testing.ports import free_port
from tests.support.s3proxy import CREDENTIAL, IDENTITY, S3Proxy


def s3_location(proxy: S3Proxy, bucket: str, **changes: str) -> S3Location:
    values = {
        "bucket": bucket,
        "prefix": "tier",
        "endpoint": proxy.endpoint,
        "region": "us-east-1",
        "access_key_id": IDENTITY,
        "secret_access_key": CREDENTIAL,
    }
    values.update(changes)
    return S3Location(**values)


@pytest.fixture(params=["filesystem", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChunkStore]:
    chunks: ChunkStore
    if request.param == "filesystem":
        files = FileChunkStore(tmp_path / "chunks")
        files.prepare()
        chunks = files
    else:
        proxy: S3Proxy = request.getfixturevalue("s3proxy")
        chunks = S3ChunkStore(s3_location(proxy, request.getfixturevalue("bucket")))
    try:
        yield chunks
    finally:
        await chunks.close()


async def names(store: ChunkStore, prefix: str = "") -> list[str]:
    return sorted([name async for name in store.names(prefix)])


async def test_an_object_reads_back_whole_and_by_range(store: ChunkStore) -> None:
    pieces = [os.urandom(1000), b"", os.urandom(70_000), b"tail"]
    whole = b"".join(pieces)
    await store.put("chunks/ab/one", pieces)
    assert await store.get("chunks/ab/one", 0, len(whole)) == whole
    assert await store.get("chunks/ab/one", 999, 5) == whole[999:1004]
    assert await store.get("chunks/ab/one", len(whole) - 4, 4) == b"tail"
    # A range past the end is cut at the end, never padded.
    assert await store.get("chunks/ab/one", len(whole) - 2, 100) == b"il"
    assert await store.get("chunks/ab/one", 10, 0) == b""


async def test_a_missing_object_is_chunk_missing_and_deletes_are_idempotent(store: ChunkStore) -> None:
    with pytest.raises(ChunkMissing):
        await store.get("chunks/zz/none", 0, 10)
    await store.put("chunks/zz/gone", [b"bytes"])
    await store.delete("chunks/zz/gone")
    await store.delete("chunks/zz/gone")
    await store.delete("chunks/zz/never-there")
    with pytest.raises(ChunkMissing):
        await store.get("chunks/zz/gone", 0, 5)


async def test_names_lists_what_is_there_under_a_prefix(store: ChunkStore) -> None:
    await asyncio.gather(*(store.put(f"chunks/{i % 3:02d}/c{i}", [b"x" * i]) for i in range(1, 8)))
    await store.put("probes/p", [b"p"])
    assert await names(store, "chunks/") == sorted(f"chunks/{i % 3:02d}/c{i}" for i in range(1, 8))
    assert len(await names(store)) == 8
    await store.delete("chunks/01/c1")
    assert "chunks/01/c1" not in await names(store, "chunks/")


async def test_the_probe_passes_on_a_working_store_and_leaves_nothing(store: ChunkStore) -> None:
    await check_chunk_store(store, "--tier")
    assert await names(store) == []


# --- the filesystem -------------------------------------------------------------------------------


async def test_a_crash_mid_write_leaves_no_object_and_start_up_clears_the_partial_file(
    tmp_path: Path,
) -> None:
    root = tmp_path / "chunks"
    store = FileChunkStore(root)
    store.prepare()
    (root / "chunks" / "ab").mkdir(parents=True)
    partial = root / "chunks" / "ab" / "one.0123.partial"
    partial.write_bytes(b"half of a chunk")
    assert await names(store) == []
    with pytest.raises(ChunkMissing):
        await store.get("chunks/ab/one", 0, 4)
    FileChunkStore(root).prepare()
    assert not partial.exists()


async def test_a_name_cannot_leave_the_directory(tmp_path: Path) -> None:
    store = FileChunkStore(tmp_path / "chunks")
    store.prepare()
    for bad in ("../outside", "chunks/../../outside", "x.partial"):
        with pytest.raises(ValueError):
            await store.put(bad, [b"x"])


async def test_an_unusable_directory_is_refused_naming_the_setting(tmp_path: Path) -> None:
    # A regular file where the directory should be (root ignores permissions, so no chmod test).
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ChunkStoreMisconfigured) as refused:
        FileChunkStore(blocker / "chunks").prepare()
    assert refused.value.setting == "--tier-directory"


class _PiecesHeldAtTheFirst(list[bytes]):
    """Pieces whose iteration stops in the writing thread until the test lets it go on."""

    def __init__(self, pieces: list[bytes]) -> None:
        super().__init__(pieces)
        self.writing = threading.Event()
        self.go_on = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        self.writing.set()
        self.go_on.wait(timeout=30)
        return super().__iter__()


async def test_close_waits_for_a_write_whose_caller_was_cancelled(tmp_path: Path) -> None:
    # A storage writer cancelled mid-put leaves the write going on in its thread; whoever closes
    # the store and then removes the directory must not find a file appearing after close.
    root = tmp_path / "chunks"
    store = FileChunkStore(root)
    store.prepare()
    pieces = _PiecesHeldAtTheFirst([b"late ", b"chunk"])
    put = asyncio.create_task(store.put("chunks/ab/late", pieces))
    assert await asyncio.to_thread(pieces.writing.wait, 10)
    put.cancel()
    with pytest.raises(asyncio.CancelledError):
        await put
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.2)
    assert not closing.done(), "close returned while a write was still in its thread"
    pieces.go_on.set()
    await asyncio.wait_for(closing, 10)
    assert (root / "chunks" / "ab" / "late").read_bytes() == b"late chunk"
    assert [path.name for path in root.rglob("*") if path.is_file()] == ["late"]


# --- S3 ------------------------------------------------------------------------------------------


async def test_the_probe_names_the_bucket_when_it_does_not_exist(s3proxy: S3Proxy) -> None:
    store = S3ChunkStore(s3_location(s3proxy, "no-such-bucket"))
    try:
        with pytest.raises(ChunkStoreMisconfigured) as refused:
            await check_chunk_store(store, "--tier-s3-endpoint")
    finally:
        await store.close()
    assert refused.value.setting == "--tier-s3-bucket"
    assert "no-such-bucket" in str(refused.value)


async def test_the_probe_names_the_credentials_when_they_are_wrong(s3proxy: S3Proxy, bucket: str) -> None:
    store = S3ChunkStore(s3_location(s3proxy, bucket, secret_access_key="wrong"))
    try:
        with pytest.raises(ChunkStoreMisconfigured) as refused:
            await check_chunk_store(store, "--tier-s3-endpoint")
    finally:
        await store.close()
    assert "AWS_ACCESS_KEY_ID" in refused.value.setting
    assert s3proxy.count(bucket) == 0


async def test_the_probe_names_the_endpoint_when_nothing_answers_there(s3proxy: S3Proxy, bucket: str) -> None:
    store = S3ChunkStore(s3_location(s3proxy, bucket, endpoint=f"http://127.0.0.1:{free_port()}"))
    try:
        with pytest.raises(ChunkStoreMisconfigured) as refused:
            await check_chunk_store(store, "--tier-s3-endpoint")
    finally:
        await store.close()
    assert refused.value.setting == "--tier-s3-endpoint"
    assert "cannot be reached" in str(refused.value)


async def test_an_outage_is_retryable_and_the_objects_are_there_after_it(
    s3proxy: S3Proxy, bucket: str
) -> None:
    store = S3ChunkStore(s3_location(s3proxy, bucket))
    try:
        await store.put("chunks/aa/kept", [b"kept bytes"])
        s3proxy.stop()
        try:
            with pytest.raises(ChunkStoreUnavailable):
                await store.get("chunks/aa/kept", 0, 4)
            with pytest.raises(ChunkStoreUnavailable):
                await store.put("chunks/aa/new", [b"x"])
            with pytest.raises(ChunkStoreUnavailable):
                await store.delete("chunks/aa/kept")
        finally:
            s3proxy.start()
        assert await store.get("chunks/aa/kept", 0, 10) == b"kept bytes"
    finally:
        await store.close()


async def test_objects_live_under_the_prefix(s3proxy: S3Proxy, bucket: str) -> None:
    store = S3ChunkStore(s3_location(s3proxy, bucket, prefix="deep/prefix"))
    try:
        await store.put("chunks/aa/one", [b"1"])
        assert await names(store) == ["chunks/aa/one"]
    finally:
        await store.close()
    assert (s3proxy.objects / bucket / "deep" / "prefix" / "chunks" / "aa" / "one").is_file()
