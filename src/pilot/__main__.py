import sys

from pilot.cli.main import main

sys.exit(main())
