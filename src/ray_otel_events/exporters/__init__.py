"""Senders: the shared publisher loop and one client per destination kind."""
