"""`python3 -m leaseevidence` (from scripts/): the same as `scripts/evidence`."""

import sys

from leaseevidence.cli import main

sys.exit(main())
