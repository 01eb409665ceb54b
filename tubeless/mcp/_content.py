"""A tool result's value: every content block kept, in a documented JSON form, within a bound.

- Only text blocks: the ``structuredContent`` when the server sent one, else the text (the
  blocks joined by newlines), as always.
- Any other block (image, audio, ``resource_link``, embedded ``resource``): an object
  ``{"text", "structured_content"?, "content": [...]}`` holding every block in order::

      {"type": "text", "text": ...}
      {"type": "image" | "audio", "mime_type": ..., "data": <base64>}
      {"type": "resource_link", "uri", "name", "title"?, "description"?, "mime_type"?, "size"?}
      {"type": "resource", "uri", "mime_type"?, "text" | "data": <base64>}

  (absent optional fields are omitted; annotations and ``_meta`` are not kept).

A value larger than the server's ``max_result_bytes`` (as compact UTF-8 JSON) is a recoverable
``MCP_PROTOCOL_ERROR`` naming the bound: never cut short in silence.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tubeless.agent import ToolError
from tubeless.mcp._errors import MCP_PROTOCOL_ERROR

if TYPE_CHECKING:
    from mcp.types import CallToolResult

__all__ = ["result_text", "result_value"]


def result_text(result: CallToolResult) -> str:
    """The text blocks of ``result``, joined by newlines."""
    from mcp.types import TextContent

    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def _optional(block: Any, **fields: str) -> dict[str, Any]:
    """``{key: block.<attribute>}`` for each attribute that is set."""
    found = {key: getattr(block, attribute, None) for key, attribute in fields.items()}
    return {key: value for key, value in found.items() if value is not None}


def _block(block: Any) -> dict[str, Any]:
    from mcp.types import (
        AudioContent,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageContent | AudioContent):
        return {"type": block.type, "mime_type": block.mime_type, "data": block.data}
    if isinstance(block, ResourceLink):
        return {
            "type": "resource_link",
            "uri": str(block.uri),
            "name": block.name,
            **_optional(
                block, title="title", description="description", mime_type="mime_type", size="size"
            ),
        }
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        body = (
            {"text": resource.text}
            if isinstance(resource, TextResourceContents)
            else {"data": resource.blob}
        )
        return {
            "type": "resource",
            "uri": str(resource.uri),
            **_optional(resource, mime_type="mime_type"),
            **body,
        }
    # A block type of a later protocol: its JSON as the SDK parsed it.
    dumped: dict[str, Any] = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def result_value(name: str, result: CallToolResult, bound: int) -> Any:
    """The value of tool ``name``'s successful ``result`` (see the module docstring)."""
    from mcp.types import TextContent

    value: Any
    if all(isinstance(block, TextContent) for block in result.content):
        structured = result.structured_content
        value = structured if structured is not None else result_text(result)
    else:
        value = {"text": result_text(result)}
        if result.structured_content is not None:
            value["structured_content"] = result.structured_content
        value["content"] = [_block(block) for block in result.content]
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > bound:
        raise ToolError(
            MCP_PROTOCOL_ERROR,
            f"The result of tool {name!r} is {size} bytes as JSON, over the bound of {bound} "
            "bytes (max_result_bytes).",
        )
    return value
