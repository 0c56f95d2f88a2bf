"""The gateway's HTTP plumbing, under every handler: the checks on every request (auth.py:
Host, same origin, no form posts, token and role; origin.py), the guard on slow and
unauthenticated connections (slow_clients.py, protocol.py), errors in one JSON shape
(answers.py, errors.py), what a handler reads of a request (inputs.py, params.py), server-sent
events (sse.py), the app's typed state (keys.py), request metrics (metrics.py), and the one
submit path (submit.py)."""
