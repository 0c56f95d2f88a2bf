"""The `heddle` command line's client side: submit, follow and manage runs over the HTTP API."""
