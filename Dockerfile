# pgcontroller service image. Expects an external PostgreSQL in PGCONTROLLER_DB_URL.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PGCONTROLLER_GRPC_HOST=0.0.0.0 \
    PGCONTROLLER_REST_HOST=0.0.0.0

WORKDIR /opt/pgcontroller
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY workers ./workers
COPY migrations ./migrations
COPY sql ./sql
RUN pip install --no-cache-dir -e . \
    && useradd --system --home-dir /opt/pgcontroller pgcontroller

USER pgcontroller
EXPOSE 9090 9091
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9091/health/readiness').read().strip()==b'true' else 1)"
ENTRYPOINT ["pgcontroller"]
CMD ["serve"]
