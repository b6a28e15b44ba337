"""``python -m warmfit``: the ``warmfit`` program (:func:`warmfit.cli.run`)."""

from warmfit.cli import run

if __name__ == "__main__":
    run()
