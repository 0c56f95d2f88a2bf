"""The API described: the documents it answers with (types.py), its operations
(operations.py), the OpenAPI document built from them (document.py), and that document served
at ``GET /openapi.json`` and as a page at ``GET /docs`` (page.py)."""
