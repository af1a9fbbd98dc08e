"""`python -m prefixserve.bench ...`: the same as `prefixserve bench ...`."""

from __future__ import annotations

import sys

from prefixserve.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
