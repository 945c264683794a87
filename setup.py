"""Packaging shim: ``images/`` ships as the package ``envfarm.images``.

setuptools' discovery never finds a package that exists only through a ``package-dir``
mapping, so the recipe folders are listed here (data folders count as namespace packages);
everything else lives in pyproject.toml.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

recipes = [
    "envfarm.images" + "".join(f".{part}" for part in path.relative_to("images").parts)
    for path in [Path("images"), *sorted(p for p in Path("images").rglob("*") if p.is_dir())]
    if "__pycache__" not in path.parts
]
setup(packages=[*find_namespace_packages(include=["envfarm", "envfarm.*"]), *recipes])
