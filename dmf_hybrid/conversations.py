"""The conversation log: chat messages as rows of the bundled ``Message`` type.

``indexes/conversations.toml`` defines ``Message`` (conversation, session, turn, role, text,
time, and the ``context`` the store fills with the preceding turn of the session) with the
search profile chosen on LoCoMo. :func:`message_rows` turns one ``add_messages`` call into its
rows: a message is OpenAI-style ``{"role", "content"}`` or ``{"speaker", "text"}``, with an
optional ``turn`` (its position in the conversation), ``session`` and ``time``. A message
without ``turn`` comes after the conversation's last stored turn and the ones before it in
the call; the same ``(conversation, turn)`` again is the existing message (idempotent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .checks import check_id
from .errors import ValidationError

MESSAGE_TYPE = "Message"
#: Keys a message may have: each of the first two pairs names one field.
MESSAGE_KEYS = ("role", "speaker", "content", "text", "turn", "session", "time")
MAX_MESSAGES = 1000
#: How many of a conversation's last turns ``context(conversation=...)`` includes by default.
LAST_TURNS = 6


def check_conversation(conversation: Any) -> str:
    """The conversation ID, or a ValidationError naming ``conversation``."""
    return check_id(conversation, field="conversation")


def message_rows(conversation: Any, messages: Any, next_turn: int) -> list[dict[str, Any]]:
    """The ``Message`` rows of one call (``next_turn``: the turn after the last stored one)."""
    conversation = check_conversation(conversation)
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValidationError("messages must be a list of messages", field="messages")
    if not 1 <= len(messages) <= MAX_MESSAGES:
        raise ValidationError(f"messages must hold 1 to {MAX_MESSAGES} messages",
                              field="messages")
    rows: list[dict[str, Any]] = []
    turn = next_turn
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise ValidationError(f"{where} must be an object", field=where)
        unknown = sorted(str(k) for k in message if k not in MESSAGE_KEYS)
        if unknown:
            raise ValidationError(f"{where} has an unknown key {unknown[0]!r} (known: "
                                  f"{', '.join(MESSAGE_KEYS)})", field=f"{where}.{unknown[0]}")
        role = _one(message, ("role", "speaker"), where)
        text = _one(message, ("content", "text"), where)
        row: dict[str, Any] = {"conversation": conversation, "role": role, "text": text}
        if "turn" in message:
            given = message["turn"]
            if isinstance(given, bool) or not isinstance(given, int) or given < 0:
                raise ValidationError(f"{where}.turn must be an integer >= 0",
                                      field=f"{where}.turn")
            turn = given
        row["turn"] = turn
        turn += 1
        for key in ("session", "time"):
            if message.get(key) is not None:
                row[key] = message[key]
        rows.append(row)
    return rows


def _one(message: Mapping[str, Any], keys: tuple[str, str], where: str) -> str:
    present = [k for k in keys if k in message]
    if len(present) != 1:
        raise ValidationError(f"{where} needs exactly one of {' / '.join(keys)}",
                              field=f"{where}.{keys[0]}")
    value = message[present[0]]
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{where}.{present[0]} must be a non-empty string",
                              field=f"{where}.{present[0]}")
    return value
