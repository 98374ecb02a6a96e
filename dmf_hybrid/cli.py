"""The dmf command."""

from __future__ import annotations

from pathlib import Path

import typer

from .config import Settings

app = typer.Typer(help="dmf-hybrid: a deterministic memory for AI agents.", no_args_is_help=True)
INDEXES = Path(__file__).resolve().parent.parent / "indexes"


@app.command()
def serve(data: Path = typer.Option(None, help="Memory directory (default ./dmf-data).")) -> None:
    """Open the memory, load the example domains when empty and show what is stored."""
    from .memory import Memory

    settings = Settings() if data is None else Settings(data_dir=data)
    with Memory.open(settings.data_dir, settings=settings) as mem:
        if not mem.types():
            for path in sorted(INDEXES.glob("*.toml")):
                mem.load_definitions(path)
        for etype in mem.types():
            typer.echo(f"{etype.name} v{etype.version}: {mem.count(etype.name)} entities")
        typer.echo(f"audit: {mem.verify_audit()}")


def main() -> None:
    """Entry point of the dmf console script."""
    app()
