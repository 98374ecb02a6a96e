"""The ``dmf`` console script: the command line when the ``server`` extra is installed, else a
one-line message that says how to install it.

``pip install dmf-hybrid`` is the HTTP client alone (pydantic and httpx), and a console script
cannot belong to an extra; so the script is this entry, which imports the command line only
when it is called and turns a missing server package into that message and exit code 1.
"""

from __future__ import annotations

import sys

from . import SERVER_EXTRA_HINT

#: Exit code of ``dmf`` without the server extra.
MISSING_EXTRA = 1


def main() -> None:
    """Run the ``dmf`` command line, or say which extra it needs."""
    try:
        from .cli import main as cli_main  # typer and the embedded memory: the server extra
    except ImportError as exc:
        if (exc.name or "").startswith(__package__ or "dmf_hybrid"):
            raise  # a bug of ours, not a missing extra
        sys.stderr.write(f"the dmf command needs the server extra, which this installation "
                         f"lacks ({exc.name or exc}): {SERVER_EXTRA_HINT}\n"
                         "(the HTTP client, MemoryClient, needs nothing more)\n")
        sys.exit(MISSING_EXTRA)
    cli_main()
