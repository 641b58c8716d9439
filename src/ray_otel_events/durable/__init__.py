"""What survives `kill -9`: the on-disk queue of accepted events and the recent-id window."""
