from edgeapp.cli.app import main

main()
