"""The ``spillway`` command, as installed by pip: ``python -m spillway ...``."""

import sys

from . import _native


def main() -> int:
    if sys.argv[1:2] == ["cluster"]:
        # Ray is driven from Python: the cluster's commands live there.
        from .cluster.cli import main as cluster_main

        return cluster_main(sys.argv[2:])
    if sys.argv[1:2] == ["agg"]:
        from . import agg_files

        if agg_files.wants(sys.argv[2:]):
            # Parquet is read and written through pyarrow, here.
            return agg_files.main(sys.argv[2:])
    # The command installs its own SIGINT and SIGTERM handlers: long work
    # stops at its next check, removes what it made and exits with 130/143.
    sys.stdout.flush()
    return _native.cli_main(["spillway", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
