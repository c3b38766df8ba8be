"""Tool calls from llama.cpp through a JSON grammar.

With tools offered, the reply is constrained to one JSON object, either `{"say": "<text to
speak>"}` or `{"tool": "<name>", "arguments": {...}}`: small models cannot write free-form tool
calls, but they can fill in a shape the sampler enforces. `JsonReplyReader` streams the `say`
text as it arrives and turns a tool object into a `ToolCall`; `ToolFormat` rewrites the history
for chat templates that only know role and content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from edge_agent.engines.base import ChatMessage, ToolCall, ToolSpec
from edge_agent.errors import EngineError


class ToolFormat:
    """The JSON reply format for a set of tools: its grammar, instruction and prompt."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

        functions = [tool["function"] for tool in tools]
        self.schema = reply_schema(functions)
        try:
            # Not `response_format` with a schema: llama-cpp-python falls back to unconstrained
            # JSON when the conversion fails, silently.
            self.grammar = LlamaGrammar.from_string(json_schema_to_gbnf(json.dumps(self.schema)),
                                                    verbose=False)
            self.say_grammar = LlamaGrammar.from_string(
                json_schema_to_gbnf(json.dumps(self.schema["anyOf"][0])), verbose=False)
        except Exception as exc:
            names = ", ".join(f["name"] for f in functions)
            raise EngineError(f"cannot turn the JSON schemas of the tools ({names}) into a "
                              f"grammar for llama.cpp: {type(exc).__name__}: {exc}. Simplify "
                              "their parameters (plain types, properties, required)") from exc
        self.instruction = tool_instruction(functions)

    def prompt(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """`messages` with the tool instruction in the system message, in the JSON format.

        Many small-model chat templates (SmolLM2's ChatML among them) render only role and
        content: `tool_calls` vanish and `role: tool` turns become an unknown role. So a call
        is shown as the JSON object the model writes to make one, a result as a user message,
        and the model's own spoken turns as `{"say": ...}`: the model sees its past in the
        format it must answer in. The rendering depends only on the history, so the prompt
        prefix stays stable between turns and llama.cpp reuses it.
        """
        out: list[ChatMessage] = []
        names: dict[str, str] = {}
        for message in messages:
            role, content = message.get("role"), message.get("content") or ""
            if role == "system" and not out:
                out.append({"role": "system", "content": f"{content}\n\n{self.instruction}"})
                continue
            if role == "assistant":
                if content:
                    out.append({"role": "assistant", "content": _json({"say": content})})
                for call in message.get("tool_calls") or []:
                    function = call.get("function", {})
                    names[call.get("id", "")] = function.get("name", "")
                    out.append({"role": "assistant", "content": _json(
                        {"tool": function.get("name", ""),
                         "arguments": _loads_or_text(function.get("arguments", ""))})})
                continue
            if role == "tool":
                name = names.get(message.get("tool_call_id", ""), "") or "the tool"
                role, content = "user", f"Result of {name}: {content}"
            if role == "user" and out and out[-1]["role"] == "user":
                # A result followed by what the caller said: one user turn, as templates
                # that insist on alternating roles need.
                out[-1] = {"role": "user", "content": f"{out[-1]['content']}\n{content}"}
                continue
            out.append({"role": role, "content": content})
        if not out or out[0]["role"] != "system":
            out.insert(0, {"role": "system", "content": self.instruction})
        return out


class ToolFormats:
    """Each tool set's format, made once: a conversation offers the same tools on every hop,
    and compiling their grammar takes a while."""

    def __init__(self) -> None:
        self._formats: dict[str, ToolFormat] = {}

    def of(self, tools: Sequence[ToolSpec]) -> ToolFormat:
        key = json.dumps(list(tools), sort_keys=True)
        if key not in self._formats:
            self._formats[key] = ToolFormat(tools)
        return self._formats[key]


def reply_schema(functions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """JSON schema of a reply: `{"say": text}` or `{"tool": name, "arguments": {...}}`."""
    say = {"type": "object", "properties": {"say": {"type": "string", "minLength": 1}},
           "required": ["say"], "additionalProperties": False}
    calls = [{"type": "object",
              "properties": {"tool": {"const": f["name"]},
                             "arguments": f.get("parameters") or {"type": "object"}},
              "required": ["tool", "arguments"], "additionalProperties": False}
             for f in functions]
    return {"anyOf": [say, *calls]}


def tool_instruction(functions: Sequence[dict[str, Any]]) -> str:
    # Worded after trying variants on SmolLM2-135M: an example with "..." in the say string
    # made it start every reply with "..."; naming the tool step first made it call the tool
    # for booking requests (see tests/test_llm_tools.py).
    lines = ["Tools you can use:"]
    for f in functions:
        properties: dict[str, Any] = (f.get("parameters") or {}).get("properties", {})
        shape = ", ".join(f'"{k}": {v.get("type", "value")}' for k, v in properties.items())
        lines.append(f"{f['name']}: {f.get('description', '')} Arguments: {{{shape}}}")
    lines += ["", 'Always answer with one JSON object. To use a tool: {"tool": "<name>", '
              '"arguments": {...}}. To speak: {"say": "<what you say>"}.',
              "When the user asks for something a tool does, use the tool first; you get its "
              "result and then speak."]
    return "\n".join(lines)


_FIRST_KEY = re.compile(r'\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*(\S)')
_NOT_AN_OBJECT = re.compile(r"\s*[^\s{]")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class JsonReplyReader:
    """Reads a reply in the tool format as it streams.

    A `say` string comes out character by character as soon as it is decoded (escapes split
    across pieces included), never the JSON around it. Anything else is kept until the end and
    parsed as a tool call.
    """

    def __init__(self) -> None:
        self.raw = ""
        """Everything pushed so far."""
        self.kind: str | None = None
        """"say", "tool" (any other object) or "other" (not a JSON object), once known."""
        self._at = 0
        """Say: where the undecoded part of the string starts in `raw`."""
        self._closed = False
        """Say: the closing quote was read."""

    def push(self, piece: str) -> str:
        """Add a piece of the reply; returns the text to speak that it completes (maybe "")."""
        self.raw += piece
        if self.kind is None:
            first = _FIRST_KEY.match(self.raw)
            if first is not None:
                self.kind = "say" if first[1] == "say" and first[2] == '"' else "tool"
                self._at = first.end()
            elif _NOT_AN_OBJECT.match(self.raw):
                self.kind = "other"
        return self._decode() if self.kind == "say" and not self._closed else ""

    def _decode(self) -> str:
        raw, at, out = self.raw, self._at, []
        while at < len(raw):
            char = raw[at]
            if char == '"':
                self._closed = True
                at += 1
                break
            if char != "\\":
                out.append(char)
                at += 1
                continue
            if at + 1 >= len(raw):
                break  # the escape's second half is in a later piece
            if raw[at + 1] != "u":
                out.append(_ESCAPES.get(raw[at + 1], raw[at + 1]))
                at += 2
                continue
            decoded = _unicode_escape(raw, at)
            if decoded is None:
                break
            text, at = decoded
            out.append(text)
        self._at = at
        return "".join(out)

    def tool_call(self, call_id: str) -> ToolCall | None:
        """At the end of the reply: the tool call it holds, if it is not speech.

        A call cut short (by max_tokens) still comes back, with whatever arguments were
        written, so the tool's check tells the model what was wrong instead of dropping it.
        """
        if self.kind != "tool":
            return None
        try:
            reply = json.loads(self.raw)
        except json.JSONDecodeError:
            name = re.search(r'"tool"\s*:\s*"([^"]*)"', self.raw)
            arguments = re.search(r'"arguments"\s*:\s*(.*)$', self.raw, re.S)
            return ToolCall(call_id, name[1] if name else "",
                            arguments[1].strip() if arguments else "")
        # A "tool" reply began `{"tool":`, so what parses is an object.
        return ToolCall(call_id, str(reply.get("tool", "")), _json(reply.get("arguments", {})))


def _unicode_escape(raw: str, at: int) -> tuple[str, int] | None:
    """Decode `\\uXXXX` at `at` (with its low surrogate when it is a high one); None: wait."""
    digits = raw[at + 2:at + 6]
    if len(digits) < 4:
        return None
    try:
        code = int(digits, 16)
    except ValueError:
        return "\ufffd", at + 6
    if not 0xD800 <= code < 0xDC00:
        return ("\ufffd" if 0xDC00 <= code < 0xE000 else chr(code)), at + 6
    low = raw[at + 6:at + 12]
    if len(low) < 6 and ("\\u".startswith(low) or low.startswith("\\u")):
        return None
    if low.startswith("\\u"):
        try:
            low_code = int(low[2:], 16)
        except ValueError:
            low_code = 0
        if 0xDC00 <= low_code < 0xE000:
            return chr(0x10000 + ((code - 0xD800) << 10) + (low_code - 0xDC00)), at + 12
    return "\ufffd", at + 6


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _loads_or_text(arguments: str) -> object:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
