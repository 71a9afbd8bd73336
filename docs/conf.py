"""Sphinx configuration; built with ``-W`` (warnings are errors) in CI."""

project = "scrapy-walsh-research"
author = "Walsh-Research"
copyright = "2026, Walsh-Research"
release = "0.1.0"
extensions: list[str] = []
exclude_patterns = ["_build"]
html_theme = "alabaster"
