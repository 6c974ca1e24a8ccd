"""Build hook for the optional C mirror loop (worker/_native.c); all metadata lives in setup.cfg.

``optional=True``: where no C compiler is present (a slim container image) the package still
installs and the worker runs its Python loop (worker.native.load returns None and says why).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("worker._native", ["worker/_native.c"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wno-unused-function"])])
