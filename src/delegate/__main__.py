from delegate.cli import main

main()
