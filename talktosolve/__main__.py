"""`python -m talktosolve`: the `talktosolve` command, where console scripts are not on PATH (clusters, venvs
used without activation)."""

import sys

from talktosolve.cli import main

if __name__ == "__main__":  # not when a spawned process imports the main module again
    sys.exit(main())
