"""The ``spillway`` command, as installed by pip: ``python -m spillway ...``."""

import signal
import sys

from . import _native


def main() -> int:
    # Let Ctrl-C stop long native work at once, as it does the Rust binary.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    return _native.cli_main(["spillway", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
