"""The conversation log: chat messages as rows of the bundled ``Message`` type.

``Message`` (conversation, session, turn, role, text, time, and the ``context`` the store fills
with the preceding turn of the session, with the search profile chosen on LoCoMo) is a
bundled type (``dmf_hybrid/_internal/bundled.toml``): every memory defines it on first use.
:func:`message_rows` turns one ``add_messages`` call into its rows: a message is OpenAI-style
``{"role", "content"}`` or ``{"speaker", "text"}``, with an optional ``turn`` (its position in
the conversation, from 0 to :data:`MAX_TURN`), ``session`` and ``time``. A message without
``turn`` comes after the largest turn of the conversation, stored or earlier in the same call.
A call never loses a message: two messages of one call with the same turn are a ``Conflict``
naming both, and so is a message whose turn the conversation holds with another role or text;
the same message again (same turn, same values) is the stored one (idempotent).

:func:`scope_to_conversation` adds ``conversation = id`` to a search's filter
(``search(..., conversation=id)``), and :func:`check_turns` checks how many of a
conversation's last turns ``context(conversation=id, turns=n)`` shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .checks import LAST_TURNS, MAX_TURNS, check_id
from .errors import Conflict, SchemaError, ValidationError
from .filters import BoolOp, FilterNode, parse_filter
from .schema import EntityType

MESSAGE_TYPE = "Message"
#: Keys a message may have: each of the first two pairs names one field.
MESSAGE_KEYS = ("role", "speaker", "content", "text", "turn", "session", "time")
MAX_MESSAGES = 1000
#: One message's JSON Schema: role and content (or speaker and text), an optional turn,
#: session and time.
MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {"role": {"type": "string"}, "content": {"type": "string"},
                   "speaker": {"type": "string"}, "text": {"type": "string"},
                   "turn": {"type": "integer", "minimum": 0}, "session": {"type": "integer"},
                   "time": {"type": "string", "format": "date-time"}}}
#: The largest turn number a message may have (a conversation of a billion turns is not one).
MAX_TURN = 999_999_999
CONVERSATION_FIELD = "conversation"
#: The fields every conversation-log type has (the bundled Message type has more).
LOG_FIELDS = (CONVERSATION_FIELD, "turn", "role", "text")


def check_conversation(conversation: Any) -> str:
    """The conversation ID, or a ValidationError naming ``conversation``."""
    return check_id(conversation, field="conversation")


def scope_to_conversation(etype: EntityType, node: FilterNode | None, conversation: Any
                          ) -> FilterNode | None:
    """``node`` AND ``conversation = id`` (``node`` itself when no conversation is given).

    A SchemaError naming ``conversation`` when the type has no ``conversation`` field.
    """
    if conversation is None:
        return node
    conversation = check_conversation(conversation)
    if CONVERSATION_FIELD not in etype.fields:
        raise SchemaError(f"{etype.name} has no field 'conversation', so it cannot be "
                          "scoped to a conversation", field=CONVERSATION_FIELD)
    term = parse_filter(etype, {CONVERSATION_FIELD: conversation})
    assert term is not None  # a non-empty filter always parses to a node
    return term if node is None else BoolOp("$and", (node, term))


def check_log_type(etype: EntityType, field: str = "type_name") -> None:
    """A SchemaError naming ``field`` unless ``etype`` has the fields of a conversation log."""
    missing = sorted(set(LOG_FIELDS) - set(etype.fields))
    if missing:
        raise SchemaError(f"{etype.name} is not a conversation log: no field "
                          f"{missing[0]!r}", field=field)


def log_available(types: Sequence[EntityType]) -> bool:
    """Whether ``add_messages`` can append to the default log: ``Message`` is not defined yet
    (the bundled type is then defined on first use) or is defined with the log's fields."""
    found = [t for t in types if t.name == MESSAGE_TYPE]
    return not found or not set(LOG_FIELDS) - set(found[0].fields)


def check_turns(turns: Any, conversation: Any) -> int | None:
    """How many last turns a context shows: ``turns``, LAST_TURNS by default, None without a
    conversation; a ValidationError naming ``turns`` or ``conversation`` otherwise."""
    if conversation is None:
        if turns is not None:
            raise ValidationError("turns needs a conversation", field="turns")
        return None
    check_conversation(conversation)
    if turns is None:
        return LAST_TURNS
    if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= MAX_TURNS:
        raise ValidationError(f"turns must be an integer from 1 to {MAX_TURNS}", field="turns")
    return turns


def check_messages(messages: Any) -> Sequence[Any]:
    """The ``messages`` of one ``add_messages`` call: a list of 1 to :data:`MAX_MESSAGES`
    (each message is checked as it becomes a row)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValidationError("messages must be a list of messages", field="messages")
    if not 1 <= len(messages) <= MAX_MESSAGES:
        raise ValidationError(f"messages must hold 1 to {MAX_MESSAGES} messages",
                              field="messages")
    return messages


def message_rows(conversation: Any, messages: Any, next_turn: int) -> list[dict[str, Any]]:
    """The ``Message`` rows of one call (``next_turn``: the turn after the last stored one).

    A message without a turn takes the turn after the largest one so far, stored or given
    earlier in the call; two messages of the call with the same turn are a ``Conflict``.
    """
    conversation = check_conversation(conversation)
    messages = check_messages(messages)
    rows: list[dict[str, Any]] = []
    turn = next_turn
    seen: dict[int, int] = {}  # turn -> index of the message of this call that has it
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
            if isinstance(given, bool) or not isinstance(given, int) or not (
                    0 <= given <= MAX_TURN):
                raise ValidationError(f"{where}.turn must be an integer from 0 to {MAX_TURN}",
                                      field=f"{where}.turn")
            message_turn = given
        else:
            message_turn = turn
            if message_turn > MAX_TURN:
                raise ValidationError(f"{where} would take turn {message_turn}, past the last "
                                      f"turn a conversation may have ({MAX_TURN})",
                                      field=f"{where}.turn")
        if message_turn in seen:
            raise Conflict(f"messages[{seen[message_turn]}] and {where} both have turn "
                           f"{message_turn}; give each message its own turn", field=f"{where}.turn")
        seen[message_turn] = i
        row["turn"] = message_turn
        turn = max(turn, message_turn + 1)
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
