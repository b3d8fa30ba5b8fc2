from mem.cli import main

raise SystemExit(main())
