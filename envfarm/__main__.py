from envfarm.cli.main import main

main()
