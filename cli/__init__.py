"""The ``ureplicator`` command line (``python -m cli``): above every part, imported by none."""
