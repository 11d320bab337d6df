from bandpo.report.cli import main

raise SystemExit(main())
