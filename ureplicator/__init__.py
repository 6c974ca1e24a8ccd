"""The one installed namespace: ``ureplicator.cli``, ``.common``, ``.controller``, ``.worker`` and the rest.

The source tree keeps these packages as top-level folders (the design card's layout). In a
checkout, ``ureplicator/<name>`` is a symbolic link to ``<name>/``; a built wheel maps the
folders under this package through ``package_dir`` in setup.py, so installing it adds exactly
one top-level package to site-packages.
"""
