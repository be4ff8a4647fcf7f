import sys

from tokembed.cli import main

sys.exit(main())
