"""libpq connection URLs, understood once for every client of the project (the service over
asyncpg, migrations over SQLAlchemy, the pipeline over JDBC). Pure: the standard library only."""

from pgurl.asyncpg_args import connect_kwargs, server_settings_of
from pgurl.jdbc import JdbcParts, jdbc_parts
from pgurl.parse import PgUrl, PgUrlError, masked, parse
from pgurl.pgpass import password_from_file, write_pgpass

__all__ = [
    "JdbcParts",
    "PgUrl",
    "PgUrlError",
    "connect_kwargs",
    "jdbc_parts",
    "masked",
    "parse",
    "password_from_file",
    "server_settings_of",
    "write_pgpass",
]
