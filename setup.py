"""Build hook: the one ``ureplicator`` namespace over the source tree's folders, and the optional C mirror loop.

The repository keeps ``cli/``, ``common/``, ``worker/``… at its root (the design card's layout);
the wheel installs them as ``ureplicator.cli``, ``ureplicator.common``… so it adds exactly one
top-level package to site-packages. Every other piece of metadata lives in setup.cfg.

``optional=True``: where no C compiler is present (a slim container image) the package still
installs and the worker runs its Python loop (worker.native.load returns None and says why).
"""

from setuptools import Extension, find_packages, setup

# devtools/ (local stack, demo, jar and helm fetching), bench/ and tests/ stay in the checkout.
RUNTIME = ("cli", "common", "controller", "reports", "worker", "verifier", "failover")

setup(
    package_dir={"ureplicator": "ureplicator", **{f"ureplicator.{top}": top for top in RUNTIME}},
    packages=["ureplicator", *(f"ureplicator.{pkg}" for pkg in find_packages(include=[f"{top}*" for top in RUNTIME]))],
    ext_modules=[Extension("ureplicator.worker._native", ["worker/_native.c"], optional=True,
                           extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"])],
)
