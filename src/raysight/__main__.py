from raysight.cli import main

main()
