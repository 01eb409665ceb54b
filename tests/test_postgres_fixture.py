"""The throwaway PostgreSQL server the store tests use starts and hands out fresh databases."""

from __future__ import annotations

import psycopg

from tests.fixtures.postgres import postgres_dsn, postgres_server  # noqa: F401 (fixtures)


def test_each_test_gets_an_empty_database_of_its_own(postgres_dsn: str) -> None:  # noqa: F811
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        tables = conn.execute(
            "select count(*) from information_schema.tables where table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
