"""The entity types the evaluation ingests through the public ``Memory`` API.

- :class:`Document`: one BEIR corpus document; identity ``doc_id``; embedded (and indexed for
  BM25) as ``"{title} {text}"``, the BEIR convention.
- :class:`DialogTurn`: one LoCoMo dialog turn, the paper's memory unit, with its structure as
  typed fields (conversation, session number and date, speaker, dia_id, position). The paper's
  unit text, ``<speaker> said, "<text>"`` plus `` and shared <caption>`` when the turn has an
  image, needs a conditional the template language does not have, so it is precomputed into
  ``unit_text``. The template is ``"{context} {unit_text}"``: ``context`` is empty under the
  paper's protocol (the embedded text is then exactly the unit text) and holds the unit texts
  of the preceding turns of the same session when the runner's ``context`` option asks for
  them (neighbouring-turn context: the turn is still the unit that is retrieved and scored).

The gold IDs of the benchmarks are compared with the ``doc_id`` / ``dia_id`` fields of the hits,
never with entity IDs (those are content-derived by the memory).
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

DOCUMENT_TYPE = "Document"
DOCUMENT_IDENTITY = ("doc_id",)
DOCUMENT_EMBED = "{title} {text}"

DIALOG_TURN_TYPE = "DialogTurn"
DIALOG_TURN_IDENTITY = ("conversation", "dia_id")
DIALOG_TURN_EMBED = "{context} {unit_text}"


class Document(BaseModel):
    """A corpus document of a BEIR-format dataset."""

    doc_id: str = Field(description="The dataset's own document ID (the qrels use it).")
    title: str = ""
    text: str = ""


class DialogTurn(BaseModel):
    """One turn of a long conversation (LoCoMo), the unit of retrieval."""

    conversation: str = Field(description="Conversation (sample) ID; searches filter on it.")
    session: int = Field(description="Session number, from 1.")
    session_date: dt.datetime | None = Field(None, description="When the session took place.")
    speaker: str
    dia_id: str = Field(description='Dialog ID "D<session>:<turn>" (the evidence uses it).')
    text: str
    blip_caption: str | None = Field(None, description="Caption of the image shared, if any.")
    turn_index: int = Field(description="0-based position in the conversation.")
    unit_text: str = Field(description="The paper's memory-unit text of this turn.")
    context: str = Field("", description="Unit texts of preceding turns, embedded before it.")
