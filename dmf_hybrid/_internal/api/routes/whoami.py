"""Who the caller is: the tenant and role of the key (the web inspector shows it)."""

from __future__ import annotations

from fastapi import APIRouter

from ...wire import WhoAmIPublic
from ..auth import Role
from ..deps import Caller, State

router = APIRouter(tags=["auth"])


@router.get("/whoami")
def whoami(caller: Caller, state: State) -> WhoAmIPublic:
    """The tenant and role of the caller's key (401 for a missing or unknown key)."""
    return WhoAmIPublic(tenant=caller.tenant, role=caller.role.name.lower(),
                        key_label=caller.key_label, open=state.keys.open,
                        scope="store" if caller.role >= Role.ADMIN else "tenant")
