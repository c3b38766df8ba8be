"""`edge-agent service install | uninstall`: the systemd system service (systemd/edge-agent.service).

Part of the command line (messages and exit codes are made here and in `cli`): every step is
printed, as it is applied or, with --dry-run, instead of being applied.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.errors import ServiceError
from edge_agent.installer.steps import run_command, run_plan
from edge_agent.installer.unit import (
    Layout,
    install_plan,
    preflight,
    uninstall_plan,
)


def add_parsers(commands: Any) -> None:
    service = commands.add_parser("service", help="install or remove the systemd service "
                                                  "(system-wide ALSA; see systemd/)")
    service.set_defaults(handler=run)
    actions = service.add_subparsers(dest="action", required=True)
    install = actions.add_parser(
        "install", help="create the edge-agent user, /etc/edge-agent/edge-agent.toml (kept if "
                        "it exists; with -c FILE, that file, its data_dir set to the "
                        "service's), /var/lib/edge-agent and the unit; enable and start it")
    install.add_argument(
        "--screen", action=argparse.BooleanOptionalAction, default=None,
        help="also show the kiosk's screen ([screen] enabled) on this machine's display: "
             "Chromium in kiosk mode under cage on tty1 (edge-agent-kiosk.service; needs `apt "
             "install cage xwayland chromium`); --no-screen takes it away; neither: an installed "
             "one is kept and follows the config")
    install.add_argument(
        "--screen-user", metavar="NAME",
        help="with --screen: the user the browser runs as, an existing desktop user (default: "
             "edge-agent-kiosk, a user of its own)")
    uninstall = actions.add_parser(
        "uninstall", help="stop, disable and remove the unit; the config and the data stay "
                          "unless --purge")
    uninstall.add_argument("--purge", action="store_true",
                           help="also remove /etc/edge-agent and /var/lib/edge-agent (models, "
                                "the memory database)")
    for sub in (install, uninstall):
        sub.add_argument("--dry-run", action="store_true",
                         help="print every step (a command or a file written) and change nothing")
        sub.add_argument("--prefix-root", type=Path, metavar="DIR",
                         help="act on the system under DIR (a mounted image): files there, "
                              "systemctl/systemd-sysusers with --root, nothing started")


def run(config: Config, args: argparse.Namespace) -> int:
    del config  # the service has its own config, /etc/edge-agent/edge-agent.toml
    root = args.prefix_root
    layout = Layout(root.resolve(), live=False) if root is not None else Layout()
    if args.action == "install":
        if args.screen_user is not None and args.screen is not True:
            raise ServiceError("--screen-user names the user of the kiosk's browser: give it "
                               "with --screen")
        # `-c FILE`: that file becomes the service's config (and shapes its unit).
        plan = install_plan(layout, run_command, config_file=args.config,
                            kiosk_screen=args.screen, kiosk_user=args.screen_user)
    else:
        plan = uninstall_plan(layout, run_command, purge=args.purge)
    if not args.dry_run:
        preflight(layout)
    verb = "would change" if args.dry_run else "changed"
    print(f"edge-agent service {args.action}{' (dry run: nothing is changed)' if args.dry_run else ''}"
          f"{f' under {layout.root}' if root is not None else ''}:")
    changed = run_plan(plan, args.dry_run, lambda line: print(line, flush=True))
    print(f"{changed} step(s) {verb}" if changed else "nothing to do: every step is already done")
    return 0
