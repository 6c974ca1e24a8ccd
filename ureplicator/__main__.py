"""``python -m ureplicator``: the same as the ``ureplicator`` console script."""

import sys

from ureplicator.cli.main import main

sys.exit(main())
