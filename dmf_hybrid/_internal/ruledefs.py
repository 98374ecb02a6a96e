"""Rule definitions as data (the ``[rules.<name>]`` tables of ``indexes/*.toml``).

What a rule means and how it is evaluated is :mod:`dmf_hybrid._internal.store.rules`; this module
holds only the definition models, so the HTTP client can send them without the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from .errors import SchemaError, first_problem
from .schema import read_toml

TRIGGER_OPS = ("create", "update", "append", "delete", "restore", "erase", "link", "unlink")
#: The type of the entities rules raise (the open ones are the work queue).
CONSTRAINT_TYPE = "Constraint"


class RuleTrigger(BaseModel):
    """When a rule is evaluated: a type, its operations and an optional filter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    ops: tuple[str, ...] = TRIGGER_OPS
    where: dict[str, Any] | None = None


class RuleAction(BaseModel):
    """What a rule does while its condition holds: keep one Constraint open on the entity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = "other"
    link: str | None = Field(None, description="Relation of the trigger type to Constraint.")
    message: str = "{rule}: {value} against {threshold}"


class RuleDef(BaseModel):
    """A rule as data: the ``[rules.<name>]`` table of a TOML file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str | None = None
    trigger: RuleTrigger
    condition: str
    action: RuleAction = RuleAction()


def rule_from_data(data: RuleDef | Mapping[str, Any], name: str | None = None) -> RuleDef:
    """A RuleDef from its data form, or a SchemaError naming the bad part."""
    if isinstance(data, RuleDef):
        return data
    if not isinstance(data, Mapping):
        raise SchemaError("a rule must be an object", field="rule")
    body = dict(data)
    if name is not None:
        body["name"] = name
    try:
        return RuleDef.model_validate(body)
    except pydantic.ValidationError as exc:
        loc, msg = first_problem(exc)
        raise SchemaError(f"rule {body.get('name', '?')}: {loc}: {msg}",
                          field=loc or "rule") from None


def load_rules_toml(path: str | Path) -> list[RuleDef]:
    """The rules declared in a TOML file (``[rules.<name>]`` tables), in file order."""
    rules = read_toml(path).get("rules", {})
    if not isinstance(rules, Mapping):
        raise SchemaError(f"{path}: [rules] must be a table of rules", field="rules")
    return [rule_from_data(body, name) for name, body in rules.items()]
