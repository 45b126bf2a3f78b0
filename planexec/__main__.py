"""``python -m planexec``: the ``planexec`` command, for when its script is not on ``PATH``."""

import sys

from planexec.cli import main

if __name__ == "__main__":
    sys.exit(main())
