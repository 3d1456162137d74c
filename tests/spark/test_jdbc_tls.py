"""The pipeline's JDBC connection honours the libpq URL's TLS settings against a PostgreSQL with
ssl=on: sslmode=require encrypts, verify-full checks the server against sslrootcert, and a client
certificate (sslcert/sslkey, the key as PKCS-8 DER as pgjdbc reads it) reaches the server."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from pyspark.sql import SparkSession

from app.embedded_pg import EmbeddedPostgres, ServerTls
from app.security.certs import CertFiles, make_dev_certs
from spark.jdbc import jdbc_target, query_rows
from tests.support.scratch import scratch_dir

SESSION_SSL = "SELECT ssl, coalesce(client_dn, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()"


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[tuple[EmbeddedPostgres, CertFiles, Path]]:
    root = scratch_dir("pgc-jdbc-tls-")
    certs = make_dev_certs(root / "certs")
    cluster = EmbeddedPostgres(
        root / "data", fast=True, tls=ServerTls(certs.server_cert, certs.server_key, certs.ca_cert)
    )
    cluster.start()
    try:
        yield cluster, certs, root
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_jdbc_over_tls(
    spark_session: SparkSession, tls_cluster: tuple[EmbeddedPostgres, CertFiles, Path]
) -> None:
    cluster, certs, root = tls_cluster
    url = cluster.url()
    # The password comes from the URL's passfile and travels as a property.
    assert query_rows(spark_session, jdbc_target(url + "&sslmode=disable"), SESSION_SSL) == [(False, "")]
    assert query_rows(spark_session, jdbc_target(url + "&sslmode=require"), SESSION_SSL) == [(True, "")]
    full = f"{url}&sslmode=verify-full&sslrootcert={certs.ca_cert}"
    assert query_rows(spark_session, jdbc_target(full), SESSION_SSL) == [(True, "")]
    key = serialization.load_pem_private_key(Path(certs.client_key).read_bytes(), password=None)
    pk8 = root / "client.pk8"
    pk8.write_bytes(
        key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    pk8.chmod(0o600)
    [(encrypted, client_dn)] = query_rows(
        spark_session, jdbc_target(f"{full}&sslcert={certs.client_cert}&sslkey={pk8}"), SESSION_SSL
    )
    assert encrypted and "pgcontroller" in client_dn
    # A server certificate from another CA is refused.
    other = make_dev_certs(root / "other").ca_cert
    with pytest.raises(Exception, match=r"(?s)SSL|certificat|PKIX"):
        query_rows(spark_session, jdbc_target(f"{url}&sslmode=verify-full&sslrootcert={other}"), SESSION_SSL)
