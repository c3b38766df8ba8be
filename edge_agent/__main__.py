from edge_agent.cli import main

raise SystemExit(main())
