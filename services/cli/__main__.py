import sys

from heddle.services.cli.main import main

sys.exit(main())
