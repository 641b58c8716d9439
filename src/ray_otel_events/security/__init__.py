"""Who may talk to a server: TLS (optionally mutual) and a bearer token."""
