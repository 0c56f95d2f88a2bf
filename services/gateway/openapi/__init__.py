"""The API described: the documents it answers with (shared/api/answers.py and
registry_answers.py), the ``Route`` record every route is declared with, beside its handler
(route.py), the OpenAPI document built from those records (document.py), that document served at
``GET /openapi.json`` and as a page at ``GET /docs`` (page.py), and the JSON Schema of a
workflow file, for editors, made from the same types (workflow_schema.py) and served at ``GET
/schema/workflow.json``."""
