"""The service's kept ``GET /tools`` answers: the definitions are built and serialised once
per state of the schema, not for every reader (60 large types made 13 MB and seconds of CPU
per call), and bounded by ``max_tools_bytes``."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..errors import LimitExceeded

ANSWERS_KEPT = 32


class KeptAnswers:
    """The JSON of the last :data:`ANSWERS_KEPT` ``GET /tools`` answers of one service, by
    (tenant, format, profile, internal, the registered type objects): a type defined or
    migrated is a new object, so a new key. The types are kept with the answer, so their
    identities are never reused while it is kept."""

    def __init__(self) -> None:
        self._answers: OrderedDict[tuple[Any, ...], tuple[bytes, list[Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self.built = 0

    def get(self, key: tuple[Any, ...], types: list[Any], build: Callable[[], Any],
            limit: int) -> bytes:
        """The JSON of ``build()`` for ``key``, built once, bounded by ``limit`` bytes."""
        with self._lock:
            kept = self._answers.get(key)
            if kept is not None:
                self._answers.move_to_end(key)
                return kept[0]
        body = json.dumps(build(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self.built += 1
        if len(body) > limit:
            raise LimitExceeded(f"the tool definitions take {len(body)} bytes, more than "
                                f"max_tools_bytes ({limit}); ask for profile=compact (each "
                                "type described once) or define fewer or smaller types",
                                field="profile", limit=limit, size=len(body))
        with self._lock:
            self._answers[key] = (body, types)
            while len(self._answers) > ANSWERS_KEPT:
                self._answers.popitem(last=False)
        return body
