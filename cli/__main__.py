from mem_retrieval.cli.main import main

raise SystemExit(main())
