"""`python -m chaos`: see chaos.scenario."""

import sys

from chaos.scenario import main

sys.exit(main())
