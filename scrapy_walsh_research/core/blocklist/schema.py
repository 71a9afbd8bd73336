"""The published blocklist JSON Schema, bundled verbatim as the offline fallback."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def bundled_schema_text() -> str:
    return resources.files(__package__).joinpath("blocklist.schema.json").read_text()


def bundled_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(bundled_schema_text())
    return schema
