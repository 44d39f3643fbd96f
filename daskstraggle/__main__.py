"""``python -m daskstraggle``: the command line, as the ``daskstraggle`` script."""

import sys

from daskstraggle._entry import main

if __name__ == "__main__":
    sys.exit(main())
