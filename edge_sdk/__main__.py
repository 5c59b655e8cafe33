import sys

from edge_sdk.cli import main

sys.exit(main())
