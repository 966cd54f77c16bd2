"""The `ledgergc orphans` subcommand (placeholder until its issue lands)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("orphans", help="not implemented yet")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=lambda args, settings: 2)
