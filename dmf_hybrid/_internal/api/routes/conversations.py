"""Conversations: append chat messages to a conversation's log (``Memory.add_messages``)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from ...models import Entity
from ...requests import MessagesAppend
from ..deps import Audit, WriterMemory

router = APIRouter(tags=["conversations"])


@router.post("/conversations/{conversation}/messages", status_code=status.HTTP_201_CREATED,
             responses={200: {"description": "Every message was already stored (a re-send)."},
                         409: {"description": "Two messages of the call, or a message and a "
                                              "stored one, claim the same turn."}})
def add_messages(conversation: str, body: MessagesAppend, memory: WriterMemory,
                 audit: Audit, response: Response) -> list[Entity]:
    """Append messages to a conversation (all or none; idempotent per conversation and turn)."""
    stored = memory.add_messages(conversation, body.messages, type_name=body.type_name,
                                 **audit.kwargs())
    if not any(entity.created for entity in stored):
        response.status_code = status.HTTP_200_OK
    return stored
