from warmfit.cli import main

main()
