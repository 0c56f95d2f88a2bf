"""The API's handlers by resource, each module declaring its routes once, as ``ROUTES``
(openapi/route.py): runs (runs.py, run_steps.py, run_events.py, run_control.py), step logs
(logs.py, log_follow.py, log_documents.py), the runner pool (runners.py), registered
workflows (workflows.py, triggers.py, history.py), API tokens (tokens.py) and the process's
probes and metrics (operations.py)."""
