from warmfit.cli import run

run()
