"""`python -m prefixserve.simulator ...` is `prefixserve simulate ...`."""

import sys

from prefixserve.simulator.cli import main

sys.exit(main())
