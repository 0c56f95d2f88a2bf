"""The compatibility promise (docs/upgrading.md): the golden samples of every message and
record of past releases (samples/<version>/, frozen), read by today's code, and the script
that writes a release's samples (make_samples.py). Pure, like tests/unit."""
