"""The collfuse Python package's version (pyproject.toml reads it; tests/python/test_lookup.py
checks it against CMake's project(VERSION) and the library's cf_version())."""

__version__ = "0.1.0"
