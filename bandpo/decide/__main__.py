from bandpo.decide.cli import main

raise SystemExit(main())
