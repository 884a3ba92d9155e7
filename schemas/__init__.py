"""The record formats, installed as the package `gateway.schemas` (see setup.py).

Read them with `importlib.resources.files("gateway.schemas")`, never by a path
relative to the source tree: an installed gateway has no source tree.
"""
