from loopwise.cli import main

main()
