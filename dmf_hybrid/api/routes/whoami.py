"""Who the caller is: the tenant and role of the key (the web inspector shows it)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from ..deps import Caller, State

router = APIRouter(tags=["auth"])


class WhoAmIPublic(BaseModel):
    """The caller's tenant, role and key label; ``open`` when the service has no keys."""

    tenant: str
    role: str = Field(description='"reader", "writer" or "admin".')
    key_label: str | None = Field(None, description="The actor name writes with this key get.")
    open: bool = Field(description="True when the service runs without API keys.")


@router.get("/whoami")
def whoami(caller: Caller, state: State) -> WhoAmIPublic:
    """The tenant and role of the caller's key (401 for a missing or unknown key)."""
    return WhoAmIPublic(tenant=caller.tenant, role=caller.role.name.lower(),
                        key_label=caller.key_label, open=state.keys.open)
