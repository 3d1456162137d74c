"""One S3Proxy for this directory's tests (started once per worker, a fresh bucket per test)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.s3proxy import S3Proxy, running_s3proxy


@pytest.fixture(scope="module")
def s3proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Proxy]:
    with running_s3proxy(Path(tmp_path_factory.mktemp("s3proxy"))) as proxy:
        yield proxy


@pytest.fixture
def bucket(s3proxy: S3Proxy) -> str:
    return s3proxy.bucket(f"b-{uuid.uuid4().hex[:12]}")
