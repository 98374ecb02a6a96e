"""The plan executor: validate an agent's list of operations, dry-run it or commit it atomically.

A plan is a list of steps ``{"op": "create" | "update" | ..., **arguments}``. A later step may
use an earlier step's result through a reference string: ``"$0.id"``,
``"$2.hits[0].entity.id"`` or ``"$1.items[3].data.budget"`` (a whole string only; write
``"$$..."`` for a literal text that starts with ``$``).

Execution has two phases:

1. *static validation* of every step against the schema and the current state (types,
   fields, values, references, IDs that exist in the tenant or are created earlier in the plan,
   expected versions); every problem found is reported at once;
2. *trial run* of all steps inside one write transaction, which commits only if every step
   succeeds (``dry_run=True`` always rolls it back, restoring the audit seq counter too).

An invalid plan raises :class:`PlanError` whose ``details["problems"]`` lists
``{"step", "field", "problem", "hint"}`` entries, and changes nothing.

Modules: ``ops`` (operations, their arguments and JSON results), ``refs`` (references and
result shapes), ``problems`` (problems and hints), ``validation`` (the static checks),
``executor`` (the transaction, dry runs and the diff).
"""

from __future__ import annotations

from ..checks import DIRECTIONS, SEARCH_MODES
from ..operations import Problems
from .executor import diff_entry, execute_plan, validate_plan
from .ops import (
    MUTATING_OPS,
    OP_ARGS,
    OPERATIONS,
    OPS,
    ORDER_SYSTEM,
    READ_OPS,
    Arg,
    Operation,
    entity_json,
    result_json,
)
from .refs import Ref, RefError, lookup, parse_ref, resolve
from .validation import Validator

__all__ = [
    "Arg",
    "DIRECTIONS",
    "MUTATING_OPS",
    "OPERATIONS",
    "OPS",
    "OP_ARGS",
    "Operation",
    "ORDER_SYSTEM",
    "READ_OPS",
    "SEARCH_MODES",
    "Problems",
    "Ref",
    "RefError",
    "Validator",
    "diff_entry",
    "entity_json",
    "execute_plan",
    "lookup",
    "parse_ref",
    "resolve",
    "result_json",
    "validate_plan",
]
