"""The ``ureplicator`` command line (``python -m ureplicator``): above every part, imported by none."""
