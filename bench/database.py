"""The database choice shared by the benchmarks: SQLite by default, a URL, or a throwaway
PostgreSQL started for the run."""

import argparse
from collections.abc import Callable


def add_database_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    parser.add_argument(
        "--postgres", action="store_true", help="start a throwaway PostgreSQL and use it"
    )


def database_cpu_s(args: argparse.Namespace) -> float | None:
    """CPU seconds used so far by the throwaway PostgreSQL (postmaster and every backend);
    None when the bench did not start one."""
    data_dir = getattr(args, "postgres_data_dir", None)
    if data_dir is None:
        return None
    import psutil

    postmaster = psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))
    total = 0.0
    for process in [postmaster, *postmaster.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def run_with_database(
    args: argparse.Namespace, bench: Callable[[argparse.Namespace], None]
) -> None:
    """Run `bench(args)`, first starting PostgreSQL and pointing `args.database_url` at it
    when `--postgres` was given; the server is stopped afterwards."""
    postgres = None
    if args.postgres:
        from tests.harness.support import PostgresServer

        postgres = PostgresServer().start()
        args.database_url = postgres.create_database()
        assert postgres.data_dir is not None
        args.postgres_data_dir = postgres.data_dir
    try:
        bench(args)
    finally:
        if postgres is not None:
            postgres.stop()
