from schedkit.cli.commands import main

main()
