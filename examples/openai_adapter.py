"""The travel-agent loop with a real model behind any OpenAI-compatible chat endpoint.

The model gets ``mem.tools()`` as its ``tools=`` list; every tool call it makes runs through
``mem.call_tool`` (an invalid call returns the error body with its problems and hints, so the
model can correct itself) until it answers in plain text. Nothing here is run by the tests.

    python examples/openai_adapter.py --base-url http://127.0.0.1:11434/v1 --model qwen2.5:7b
    python examples/openai_adapter.py --base-url https://api.openai.com/v1 --model gpt-4o-mini \
        --api-key "$OPENAI_API_KEY"
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from travel_agent import TURNS, USER, current_state, open_memory  # noqa: E402

from dmf_hybrid import DMFError, Memory  # noqa: E402

MAX_ROUNDS = 8
SYSTEM = (
    "You are a travel agent with a long-term memory. Use the tools to read and change the "
    "memory; never invent IDs: take them from tool results or the state you are given. For "
    "several related changes, call execute_plan with a list of operations, where \"$0.id\" "
    "or \"$1.hits[0].entity.id\" refers to an earlier step's result; call it with "
    "dry_run=true first when unsure. If a call returns problems, fix exactly those and retry. "
    f"The user's handle is {USER['handle']!r}. Amounts are in CNY. Answer briefly."
)


class ChatEndpoint:
    """A minimal OpenAI-compatible ``/chat/completions`` client (httpx)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 timeout: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = model
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                 timeout=timeout)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
                 ) -> dict[str, Any]:
        """The assistant message the model returns."""
        response = self.http.post("/chat/completions", json={
            "model": self.model, "messages": messages, "tools": tools,
            "tool_choice": "auto", "temperature": 0})
        response.raise_for_status()
        message: dict[str, Any] = response.json()["choices"][0]["message"]
        return message

    def close(self) -> None:
        """Close the HTTP client."""
        self.http.close()


def run_tool(mem: Memory, call: dict[str, Any]) -> Any:
    """Execute one tool call; an error becomes its JSON body for the model to read."""
    try:
        arguments = json.loads(call["function"].get("arguments") or "{}")
        return mem.call_tool(call["function"]["name"], arguments, reason="llm tool call")
    except json.JSONDecodeError as exc:
        return {"error": "invalid_json", "message": f"arguments are not valid JSON: {exc}"}
    except DMFError as exc:
        return exc.to_payload()


def turn(mem: Memory, chat: ChatEndpoint, history: list[dict[str, Any]], message: str) -> str:
    """One user turn: let the model call tools until it answers; returns the answer."""
    state = current_state(mem, USER["handle"])
    history.append({"role": "user", "content": f"{message}\n\n(memory state: "
                                               f"{json.dumps(state, ensure_ascii=False)})"})
    tools = mem.tools()
    for _ in range(MAX_ROUNDS):
        reply = chat.complete(history, tools)
        history.append({k: v for k, v in reply.items() if v is not None})
        calls = reply.get("tool_calls") or []
        if not calls:
            return str(reply.get("content") or "")
        for call in calls:
            result = run_tool(mem, call)
            print(f"  tool {call['function']['name']}({call['function'].get('arguments')}) -> "
                  f"{json.dumps(result, ensure_ascii=False, default=str)[:300]}")
            history.append({"role": "tool", "tool_call_id": call.get("id", ""),
                            "content": json.dumps(result, ensure_ascii=False, default=str)})
    return "(the model did not answer within the tool-call budget)"


def main(argv: list[str] | None = None) -> int:
    """Play the travel conversation against the given endpoint."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:11434/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--real-model", action="store_true",
                        help="embed with the bundled sentence-transformers model")
    args = parser.parse_args(argv)
    chat = ChatEndpoint(args.base_url, args.model, args.api_key)
    try:
        with tempfile.TemporaryDirectory(prefix="dmf-travel-") as tmp:
            with open_memory(Path(tmp) / "memory", real_model=args.real_model) as mem:
                history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
                for message in TURNS:
                    print(f"\nUSER: {message}")
                    print(f"AGENT: {turn(mem, chat, history, message)}")
                report = mem.verify_audit()
                print(f"\naudit log: ok={report.ok}, {report.events_checked} events")
    finally:
        chat.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
