"""``python -m bandpo.data``: generate tiny-math or normalise a real data set (`bandpo.data.cli.main`)."""

from bandpo.data.cli import main

raise SystemExit(main())
