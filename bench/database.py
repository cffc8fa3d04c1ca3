"""The database choice shared by the benchmarks: SQLite by default, a URL, or a throwaway
PostgreSQL started for the run."""

import argparse
from collections.abc import Callable


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    parser.add_argument(
        "--postgres", action="store_true", help="start a throwaway PostgreSQL and use it"
    )


def run_with_database(
    args: argparse.Namespace, bench: Callable[[argparse.Namespace], None]
) -> None:
    """Run `bench(args)`, first starting PostgreSQL and pointing `args.database_url` at it
    when `--postgres` was given; the server is stopped afterwards."""
    postgres = None
    if args.postgres:
        from tests.support import PostgresServer

        postgres = PostgresServer().start()
        args.database_url = postgres.create_database()
    try:
        bench(args)
    finally:
        if postgres is not None:
            postgres.stop()
