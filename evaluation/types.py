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


# --------------------------------------------------------------------------- CrossWOZ
#
# CrossWOZ's Beijing database (``../shared/datasets/crosswoz/entities.jsonl``): attractions,
# restaurants and hotels, attribute names in English, values in Chinese. Identity is the name
# (unique per type in the data). Each type is embedded, and BM25-indexed, as its name, the
# list that lookups ask about (dishes, facilities) after a Chinese label, and the address;
# lists render as "a, b, c".

CROSSWOZ_IDENTITY = ("name",)
CROSSWOZ_EMBED = {
    "Attraction": "{name}，{address}",
    "Restaurant": "{name}，推荐菜：{dishes}，{address}",
    "Hotel": "{name}，设施：{facilities}，{address}",
}


class _CrossWozPlace(BaseModel):
    name: str
    address: str | None = None
    metro: str | None = None
    phone: str | None = None
    rating: float | None = None
    nearby_attractions: list[str] = Field(default_factory=list)
    nearby_restaurants: list[str] = Field(default_factory=list)
    nearby_hotels: list[str] = Field(default_factory=list)


class Attraction(_CrossWozPlace):
    """A CrossWOZ attraction (景点)."""

    ticket: float | None = Field(None, description="Ticket price in CNY; 0 = free.")
    duration: str | None = Field(None, description='Suggested visit, e.g. "3小时 - 4小时".')


class Restaurant(_CrossWozPlace):
    """A CrossWOZ restaurant (餐馆)."""

    hours: str | None = None
    dishes: list[str] = Field(default_factory=list, description="Recommended dishes.")
    price_per_person: float | None = None


class Hotel(_CrossWozPlace):
    """A CrossWOZ hotel (酒店)."""

    hotel_type: str | None = None
    facilities: list[str] = Field(default_factory=list)
    price: float | None = None


CROSSWOZ_MODELS: dict[str, type[_CrossWozPlace]] = {
    "Attraction": Attraction, "Restaurant": Restaurant, "Hotel": Hotel}
