"""``python -m ureplicator.verifier``: the verification job (same as ``ureplicator verify``)."""

import sys

from ureplicator.verifier.cli import main

sys.exit(main())
