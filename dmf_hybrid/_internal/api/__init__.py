"""The HTTP service: ``create_app`` builds the FastAPI app, ``server.run`` serves it."""

from .app import ROUTERS, create_app

__all__ = ["ROUTERS", "create_app"]
