"""``python -m cli``: the same as the ``ureplicator`` console script."""

import sys

from cli.main import main

sys.exit(main())
