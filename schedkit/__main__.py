from schedkit.cli import main

main()
