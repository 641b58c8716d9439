import sys

from ray_otel_events.cli import main

sys.exit(main())
