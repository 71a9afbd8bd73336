"""Sphinx configuration; built with ``-W`` (warnings are errors) in CI."""

from importlib import metadata

project = "scrapy-walsh-research"
author = "Walsh-Research"
copyright = "2026, Walsh-Research"
# one source: the package's __version__, as installed
release = metadata.version("scrapy-walsh-research")
extensions: list[str] = []
exclude_patterns = ["_build"]
html_theme = "alabaster"
