from warmfit.program import run

run()
