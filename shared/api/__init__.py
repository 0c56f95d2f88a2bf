"""The HTTP API as its users see it: the documents it answers with, and a client."""
