from ha_ops.cli.main import main

main()
