"""The read models of the gateway: what it reads from KV and the log stream, and keeps in
memory, with no HTTP in them: runs and their documents (runs.py, run_index.py, progress.py,
finished.py), the runner pool (pool.py), workflows (workflows.py), API tokens
(token_index.py) and step logs (log_lines.py, log_index.py, log_reader.py, log_tail.py)."""
