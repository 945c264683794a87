"""Packaging shim: ``images/`` ships as the package ``envfarm.images``.

setuptools' package discovery never finds a package that exists only through a ``package-dir``
mapping, so it is listed here; everything else lives in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["envfarm*"]), "envfarm.images"])
