from vastui.cli import main

raise SystemExit(main())
