"""The per-node collector (`ray-otel-events collect`): a Ray node's files to `serve`.

The flow, one module a step: `session_folder` finds the session Ray is writing and lists the files
it may read (nothing outside the session folder, no symlink followed); `tailer` reads each file from
its saved offset, within bounds, and knows a file by its inode and first bytes, not by its name;
`offsets` keeps those offsets and the counters on disk; `shipper` POSTs what was read to `serve`,
retrying until it is stored. services/collect_cli.py runs the loop.
"""
