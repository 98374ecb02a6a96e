"""Text in the audit headers (``X-Actor``, ``X-Reason``, ``X-Trace-Id``), any language intact.

A header is bytes and HTTP gives them no charset; Starlette hands them on decoded as
latin-1, so UTF-8 Chinese arrives as mojibake (``改`` as ``æ\\x94¹``). What a header may hold:

- **percent-encoded UTF-8** (what ``MemoryClient`` sends): ``X-Reason: %E6%94%B9%E6%88%90...``;
  an ASCII value is percent-decoded, as it always was;
- **RFC 8187** ``UTF-8''`` followed by percent-encoded UTF-8 (the ``filename*=`` form), with an
  optional language between the quotes: ``X-Reason: UTF-8''%E6%94%B9%E6%88%90...``;
- **raw UTF-8 bytes** (``curl -H 'X-Reason: 改成公司'``): taken as they are, not percent-decoded
  (a value that is not ASCII was never percent-encoded).

Anything else, a value whose bytes are not UTF-8 or whose escapes decode to no UTF-8, is
refused with a ValidationError naming the field and saying how to send it: a header is never
stored altered.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from ..checks import full_match
from ..errors import ValidationError

#: How a header's text may be sent (the OpenAPI description of each audit header).
HEADER_TEXT = ("Non-ASCII text as percent-encoded UTF-8 (%E6%94%B9), RFC 8187 "
               "(UTF-8''%E6%94%B9) or raw UTF-8 bytes.")
#: RFC 8187 ext-value with the UTF-8 charset: charset'language'value-chars.
EXT_VALUE_RE = re.compile(r"(?i:utf-8)'([A-Za-z0-9-]*)'(.*)", re.S)


def decode_header_text(value: str, header: str, field: str) -> str:
    """The text a client meant by header ``header``'s ``value`` (as Starlette gives it), or a
    ValidationError naming ``field`` that says how to send non-ASCII text."""
    if not value.isascii():
        try:
            return value.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            raise _refusal(header, field, "its bytes are not UTF-8") from None
    ext = full_match(EXT_VALUE_RE, value)
    encoded = ext.group(2) if ext is not None else value
    try:
        return unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        raise _refusal(header, field, "its %-escapes are not UTF-8") from None


def _refusal(header: str, field: str, why: str) -> ValidationError:
    return ValidationError(
        f"{header} is not readable text: {why}. Send UTF-8, percent-encoded "
        f"({header}: %E6%94%B9%E6%88%90) or in the RFC 8187 form "
        f"({header}: UTF-8''%E6%94%B9%E6%88%90); MemoryClient does it for you",
        field=field, header=header)
