"""A travel-agent conversation on dmf-hybrid: plan -> execute -> answer, with a scripted planner.

Each user turn, the planner (standing in for an LLM) gets the memory's tool definitions
(``mem.tools()``) and the current state read from memory, and returns a plan: a list of
operations where later steps use earlier results (``"$0.id"``, ``"$1.hits[0].entity.id"``).
``mem.execute_plan`` validates the whole plan (an invalid one changes nothing and lists the
problems with hints, which the planner uses to repair it), shows the diff with a dry run and
commits it in one transaction. Answers are computed from memory, never from the planner.

Run it::

    python examples/travel_agent.py               # hash embedder, a temporary directory
    python examples/travel_agent.py --real-model  # the bundled MiniLM model (slower start)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from dmf_hybrid import HashEmbedder, Memory, PlanError

TRAVEL_TOML = Path(__file__).resolve().parent.parent / "indexes" / "travel.toml"
USER: dict[str, Any] = {"handle": "alex", "name": "Alex", "home_city": "Berlin",
        "interests": ["museums", "night views"]}
TURNS = [
    "I'd like to plan a trip to Shanghai, budget 5000.",
    "Please add the Shanghai Museum and the Oriental Pearl Tower.",
    "What does my plan cost?",
]
# The places the agent knows about (its "catalogue"), stored before the conversation starts.
CATALOGUE = [
    {"name": "Shanghai Museum", "city": "Shanghai", "category": "museum",
     "description": "Ancient Chinese bronzes, ceramics, calligraphy and jade on People's "
                    "Square; free entry.", "estimated_cost": 0, "duration_hours": 3},
    {"name": "Oriental Pearl TV Tower", "city": "Shanghai", "category": "landmark",
     "description": "Pink-sphered TV tower in Lujiazui with a glass-floor observation deck.",
     "estimated_cost": 199, "duration_hours": 1.5},
    {"name": "Yu Garden", "city": "Shanghai", "category": "park",
     "description": "Ming dynasty classical garden with rockeries, ponds and pavilions.",
     "estimated_cost": 40, "duration_hours": 2},
    {"name": "The Bund", "city": "Shanghai", "category": "landmark",
     "description": "Riverside promenade of colonial-era buildings; best at night.",
     "estimated_cost": 0, "duration_hours": 1.5},
    {"name": "West Lake", "city": "Hangzhou", "category": "park",
     "description": "Lake with causeways, pagodas and tea houses.", "estimated_cost": 0},
]


def open_memory(directory: Path, real_model: bool = False) -> Memory:
    """A memory in ``directory`` with the travel types and the place catalogue."""
    embedder: Any = HashEmbedder()
    if real_model:
        from dmf_hybrid import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    mem = Memory.open(directory, embedder=embedder)
    mem.load_definitions(TRAVEL_TOML)
    mem.create_many("PointOfInterest", CATALOGUE, reason="catalogue")
    return mem


def current_state(mem: Memory, handle: str) -> dict[str, Any]:
    """What the planner sees: the user, their trips and each trip's places (from memory)."""
    users = mem.query("User", {"handle": handle}, limit=1).items
    if not users:
        return {"user": None, "trips": []}
    trips = []
    for trip in mem.query("Trip", {"user": handle}, order_by="destination").items:
        places = [{"id": r.entity.id, "name": r.entity.fields()["name"],
                   "estimated_cost": r.entity.fields()["estimated_cost"]}
                  for r in mem.related(trip.id, "includes")]
        trips.append({"id": trip.id, "version": trip.version, **trip.data.model_dump(
            mode="json", include={"destination", "budget", "currency"}), "places": places})
    return {"user": {"id": users[0].id, "handle": handle}, "trips": trips}


class ScriptedPlanner:
    """Stands in for the LLM: turns a message, the tools and the state into a plan."""

    def __init__(self) -> None:
        self.attempt = 0

    def plan(self, message: str, tools: list[dict[str, Any]], state: dict[str, Any]
             ) -> list[dict[str, Any]]:
        """The operations that carry out ``message`` (using only tools that exist)."""
        names = {t["function"]["name"] for t in tools}
        text = message.lower()
        if "trip to" in text:
            assert {"create", "link"} <= names
            destination = re.search(r"trip to ([A-Z][a-z]+)", message)
            budget = re.search(r"budget (\d+)", text)
            steps: list[dict[str, Any]] = []
            user_ref = state["user"]["id"] if state["user"] else "$0.id"
            if not state["user"]:
                steps.append({"op": "create", "type": "User", "data": USER})
            steps.append({"op": "create", "type": "Trip", "data": {
                "user": USER["handle"], "destination": destination.group(1) if destination
                else "Shanghai", "budget": float(budget.group(1)) if budget else 0.0,
                "currency": "CNY", "status": "planned"}})
            steps.append({"op": "link", "from_id": user_ref, "relation": "plans",
                          "to_id": f"${len(steps) - 1}.id"})
            return steps
        if "add" in text:
            assert "search" in names
            trip = state["trips"][0]
            wanted = re.findall(r"the ([A-Z][\w ]+?)(?= and |\.|$)", message)
            steps = [{"op": "search", "type": "PointOfInterest", "text": name,
                      "where": {"city": trip["destination"]}, "k": 1} for name in wanted]
            # A first draft with a typo, as a model might write it; the executor's hints fix it.
            relation = "include" if self.attempt == 0 else "includes"
            steps += [{"op": "link", "from_id": trip["id"], "relation": relation,
                       "to_id": f"${i}.hits[0].entity.id"} for i in range(len(wanted))]
            self.attempt += 1
            return steps
        if "cost" in text:
            trip = state["trips"][0]
            return [{"op": "get", "id": trip["id"]},
                    {"op": "related", "id": trip["id"], "relation": "includes"}]
        return []

    def repair(self, plan: list[dict[str, Any]], problems: list[dict[str, Any]]
               ) -> list[dict[str, Any]]:
        """The plan with each problem fixed from its hint ("did you mean X?")."""
        fixed = [dict(step) for step in plan]
        for problem in problems:
            match = re.search(r"did you mean ([\w]+)", problem.get("hint") or "")
            if match and problem["field"] in fixed[problem["step"]]:
                fixed[problem["step"]][problem["field"]] = match.group(1)
        return fixed


def answer(message: str, mem: Memory, state: dict[str, Any], results: list[Any]) -> str:
    """The reply to the user, computed from memory (not from the planner)."""
    text = message.lower()
    if "cost" in text:
        trip = mem.get(state["trips"][0]["id"])
        places = mem.related(trip.id, "includes")
        costs = {r.entity.fields()["name"]: float(r.entity.fields()["estimated_cost"] or 0)
                 for r in places}
        total = sum(costs.values())
        data = trip.fields()
        lines = [f"- {name}: {cost:.0f} {data['currency']}" for name, cost in
                 sorted(costs.items())]
        return (f"Your {data['destination']} plan includes {len(places)} places:\n"
                + "\n".join(lines)
                + f"\nTotal cost: {total:.0f} {data['currency']} "
                  f"(budget {data['budget']:.0f}, {data['budget'] - total:.0f} left).")
    if "add" in text:
        names = [r.entity.fields()["name"] for r in mem.related(state["trips"][0]["id"],
                                                              "includes")]
        return "Added. Your itinerary now has: " + ", ".join(sorted(names)) + "."
    trips = current_state(mem, USER["handle"])["trips"]
    return (f"Created your trip to {trips[0]['destination']} with a budget of "
            f"{trips[0]['budget']:.0f} {trips[0]['currency']}.")


def show(label: str, value: Any) -> None:
    """Print a labelled compact JSON value."""
    print(f"  {label}: {json.dumps(value, ensure_ascii=False)}")


def converse(mem: Memory, turns: list[str] = TURNS) -> list[str]:
    """Play the conversation; returns the answers."""
    planner = ScriptedPlanner()
    answers = []
    for message in turns:
        print(f"\nUSER: {message}")
        state = current_state(mem, USER["handle"])
        plan = planner.plan(message, mem.tools(), state)
        show("plan", plan)
        for _ in range(3):
            try:
                preview = mem.execute_plan(plan, dry_run=True)
                break
            except PlanError as exc:
                problems = exc.details["problems"]
                show("invalid plan, nothing changed; problems", problems)
                plan = planner.repair(plan, problems)
                show("repaired plan", plan)
        else:
            raise SystemExit("the planner could not produce a valid plan")
        if preview.diff:
            show("dry-run diff", preview.diff)
        outcome = mem.execute_plan(plan, reason=message)
        print(f"  committed={outcome.committed} seq_range={outcome.seq_range}")
        reply = answer(message, mem, state, outcome.results)
        print("AGENT: " + reply.replace("\n", "\n       "))
        answers.append(reply)
    report = mem.verify_audit()
    print(f"\naudit log: ok={report.ok}, {report.events_checked} events")
    return answers


def main(argv: list[str] | None = None) -> int:
    """Run the conversation in a temporary memory directory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-model", action="store_true",
                        help="embed with the bundled sentence-transformers model")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dmf-travel-") as tmp:
        with open_memory(Path(tmp) / "memory", real_model=args.real_model) as mem:
            converse(mem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
