"""pydantic's JSON Schema without the titles it derives from every name, for the documents we check in.

A title per property ("Records Per S") only repeats the property's name; without them the
generated OpenAPI document and report schema read like the hand-written ones they replace.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import GenerateJsonSchema


class Untitled(GenerateJsonSchema):
    """Pass as ``schema_generator=``; model titles go too (see :func:`untitled`)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def generate(self, schema: Any, mode: Any = "validation") -> Any:
        return untitled(super().generate(schema, mode))


def untitled(node: Any, in_properties: bool = False) -> Any:
    """``node`` without any ``title`` key, except a property that is called "title"."""
    if isinstance(node, dict):
        return {k: untitled(v, k == "properties" and not in_properties)
                for k, v in node.items() if in_properties or k != "title"}
    if isinstance(node, list):
        return [untitled(v) for v in node]
    return node
