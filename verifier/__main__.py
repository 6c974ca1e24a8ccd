"""``python -m verifier``: the verification job (same as ``ureplicator verify``)."""

import sys

from verifier.cli import main

sys.exit(main())
