"""Package layout that pyproject.toml cannot express: `schemas/` ships as `gateway.schemas`.

The top-level `schemas/` directory stays the source of truth for the record
formats (Avro and JSON Schema); the package `gateway.schemas` maps to it, so a
wheel carries every `*.avsc` and `*.json` file in it, and an editable install
reads them in place. Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["gateway", "gateway.*"]), "gateway.schemas"],
    package_dir={"gateway.schemas": "schemas"},
    package_data={"gateway.schemas": ["*.avsc", "*.json"]},
)
