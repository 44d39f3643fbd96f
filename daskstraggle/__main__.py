"""``python -m daskstraggle``: the command line, as the ``daskstraggle`` script."""

from daskstraggle.cli import _entry

if __name__ == "__main__":
    _entry()
