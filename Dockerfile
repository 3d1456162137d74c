# pgcontroller service image. Expects an external PostgreSQL in PGCONTROLLER_DB_URL.
# `--build-arg PIPELINE=true` adds what `pgcontroller pipeline run` needs: Java 17, Debian's
# PostgreSQL JDBC driver and PySpark (about 700 MB more).
# The package is installed from a wheel built in the first stage, as an operator installs it:
# the image holds no source tree, and the service reads its SQL, migrations and OpenAPI
# document as package data.
FROM python:3.11-slim AS wheel

WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
COPY pgurl ./pgurl
COPY migrations ./migrations
COPY sql ./sql
# The CLI parses the pipeline's arguments even in a service-only image (PySpark loads only
# when the pipeline runs), so the package is always there.
COPY spark ./spark
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheel .

FROM python:3.11-slim

ARG PIPELINE=false

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PGCONTROLLER_GRPC_HOST=0.0.0.0 \
    PGCONTROLLER_REST_HOST=0.0.0.0 \
    PGCONTROLLER_SEGMENT_STORE_HOST=0.0.0.0

WORKDIR /opt/pgcontroller
COPY --from=wheel /wheel /tmp/wheel
RUN wheel="$(echo /tmp/wheel/pgcontroller-*.whl)" \
    && if [ "$PIPELINE" = "true" ]; then \
        mkdir -p /usr/share/man/man1 \
        && apt-get update \
        && apt-get install -y --no-install-recommends openjdk-17-jre-headless libpostgresql-jdbc-java \
        && rm -rf /var/lib/apt/lists/* \
        && pip install --no-cache-dir "${wheel}[spark]"; \
    else \
        pip install --no-cache-dir "${wheel}"; \
    fi \
    && rm -rf /tmp/wheel \
    && useradd --system --home-dir /opt/pgcontroller pgcontroller

USER pgcontroller
EXPOSE 9090 9091 12345
# With PGCONTROLLER_TLS_ENABLED the probe speaks HTTPS to its own loopback port; it checks that
# this process answers, so it does not verify the certificate (whose names need not include 127.0.0.1).
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import os,ssl,sys,urllib.request as u; tls=os.environ.get('PGCONTROLLER_TLS_ENABLED','').strip().lower() in ('1','true','yes','on'); url='http://127.0.0.1:9091/v1/health/readiness'; url=url.replace('http:','https:',1) if tls else url; sys.exit(0 if u.urlopen(url, context=ssl._create_unverified_context() if tls else None).read().strip()==b'true' else 1)"
ENTRYPOINT ["pgcontroller"]
CMD ["serve"]
