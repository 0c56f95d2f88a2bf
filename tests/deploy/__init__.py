"""What ships to run Heddle elsewhere: the Helm chart (rendered offline, its hook run against a
stack), docker-compose.yml and its users, the Dockerfile and the kind script. Those run in a
real container engine are in tests/containers (`make test-containers`). `pytest -m deploy`."""
