"""What the tests share, and no test of its own: real stacks (stack.py), gateway apps, the
chart's renderer, a fake Kubernetes API, clients and the helpers several test files use."""
