from mobilize.cli.main import main

raise SystemExit(main())
