"""A strict, scripted OpenAI-compatible server for tests (stdlib only, loopback, random port).

It answers ``POST /v1/chat/completions`` (and ``/chat/completions``) with the next scripted reply
and records every request body. It is *strict*: a request a real provider would reject gets an
HTTP 400 with an OpenAI-style error body (and consumes no reply), so a test that passes here sends
histories a real provider accepts::

    from helpers.openai_server import ScriptedOpenAIServer, rate_limited, text, tool_call

    with ScriptedOpenAIServer([tool_call("ls"), tool_call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")],
                              require_tools=True) as server:
        model = LitellmModel(model_name="openai/scripted", cost_tracking="ignore_errors",
                             model_kwargs=server.model_kwargs())  # api_base=server.url + "/v1", api_key
        ...
    assert len(server.requests) == 2

What is rejected (HTTP 400):

- a message field other than ``role``, ``content``, ``name``, ``tool_calls``, ``tool_call_id``
  (``extra`` included), or a content-block field other than ``type``, ``text``, ``image_url``,
  ``cache_control``; an unknown role; a request field no chat-completions API knows;
- a tool call not answered by a ``tool`` message with its id before the next non-tool message or
  the end of the list; a ``tool`` message answering an id that is not pending;
- malformed tool calls in the history (no id, no ``function.name``, non-string ``arguments``);
- no ``tools`` list when the server was built with ``require_tools=True``; ``stream=True``.

Scripted replies are built with :func:`tool_call`, :func:`tool_calls` (several calls in one
reply), :func:`text` and :func:`error` / :func:`rate_limited`. When the script is exhausted the
server answers 400 ``"scripted server: no reply left"`` (not retryable, so a test fails fast).
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
MESSAGE_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id"}
BLOCK_FIELDS = {"type", "text", "image_url", "cache_control"}
ROLES = {"system", "developer", "user", "assistant", "tool"}
#: Request fields of the chat-completions API (anything else is "Unrecognized request argument").
REQUEST_FIELDS = {
    "model", "messages", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p", "n",
    "stream", "stream_options", "stop", "max_tokens", "max_completion_tokens", "presence_penalty",
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user", "seed", "response_format",
    "reasoning_effort", "metadata", "store", "service_tier", "modalities", "prediction", "audio",
    "web_search_options", "verbosity", "prompt_cache_key", "safety_identifier",
}
_AUTO = object()
_ids = itertools.count(1)
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
                404: "invalid_request_error", 429: "requests", 500: "server_error", 503: "server_error"}


@dataclass
class Reply:
    """One scripted answer: an HTTP error (``status`` != 200) or an assistant message."""

    status: int = 200
    message: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = "stop"
    usage: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error_body: dict[str, Any] | None = None


@dataclass
class Recorded:
    """One request the server received (header names lower-cased; ``time`` from ``time.monotonic()``)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    time: float = 0.0


def call(command: str | None = None, *, arguments: str | dict | None = None, name: str = "bash",
         id: Any = _AUTO) -> dict[str, Any]:
    """One tool call for :func:`tool_calls`.

    Args:
        command (str | None): becomes ``{"command": command}`` as JSON arguments.
        arguments (str | dict | None): raw arguments instead (a str is sent verbatim, e.g. bad JSON).
        name (str): tool name. Defaults to ``"bash"``.
        id: tool-call id; default a fresh ``call_N``; ``None`` leaves the id out.
    """
    if arguments is None:
        arguments = {"command": command}
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    entry: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if id is _AUTO:
        id = f"call_{next(_ids)}"
    if id is not None:
        entry["id"] = id
    return entry


def tool_calls(*calls: dict[str, Any], content: str | None = None, finish_reason: str = "tool_calls",
               usage: dict[str, Any] | None = None) -> Reply:
    """A reply with several tool calls (each from :func:`call`) and optional text ``content``."""
    message = {"role": "assistant", "content": content, "tool_calls": list(calls)}
    return Reply(message=message, finish_reason=finish_reason, usage=usage)


def tool_call(command: str | None = None, *, content: str | None = None, finish_reason: str = "tool_calls",
              usage: dict[str, Any] | None = None, **call_kwargs: Any) -> Reply:
    """A reply with one tool call; ``call_kwargs`` (``arguments``, ``name``, ``id``) go to :func:`call`."""
    return tool_calls(call(command, **call_kwargs), content=content, finish_reason=finish_reason, usage=usage)


def text(content: str, *, finish_reason: str = "stop", usage: dict[str, Any] | None = None) -> Reply:
    """A reply with text only (no tool call)."""
    return Reply(message={"role": "assistant", "content": content}, finish_reason=finish_reason, usage=usage)


def error(status: int, message: str = "", *, retry_after: str | float | None = None,
          code: str | None = None, headers: dict[str, str] | None = None) -> Reply:
    """An HTTP error reply with an OpenAI-style body; ``retry_after`` sets the ``Retry-After`` header."""
    headers = dict(headers or {})
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    body = {"error": {"message": message or f"scripted error {status}",
                      "type": _ERROR_TYPES.get(status, "api_error"), "param": None, "code": code}}
    return Reply(status=status, headers=headers, error_body=body)


def rate_limited(retry_after: str | float | None = 1) -> Reply:
    """HTTP 429 with ``Retry-After: retry_after`` (seconds, or an HTTP-date string)."""
    return error(429, "Rate limit reached for requests", retry_after=retry_after, code="rate_limit_exceeded")


# -- validation --------------------------------------------------------------------------------


def _check_content(where: str, content: Any, *, optional: bool = False) -> str | None:
    if content is None:
        return None if optional else f"{where}.content: expected a string or a list of content parts, got null"
    if isinstance(content, str):
        return None
    if not isinstance(content, list) or not content:
        return f"{where}.content: expected a string or a non-empty list of content parts"
    for j, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") not in ("text", "image_url"):
            return f"{where}.content[{j}]: expected a part of type 'text' or 'image_url'"
        unknown = set(block) - BLOCK_FIELDS
        if unknown:
            return f"{where}.content[{j}]: Additional properties are not allowed ({sorted(unknown)} unexpected)"
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            return f"{where}.content[{j}].text: expected a string"
    return None


def _check_tool_calls(where: str, calls: Any) -> str | None:
    if not isinstance(calls, list) or not calls:
        return f"{where}.tool_calls: expected a non-empty list"
    for j, tc in enumerate(calls):
        fn = tc.get("function") if isinstance(tc, dict) else None
        if not isinstance(fn, dict) or set(tc) - {"id", "type", "function"} or set(fn) - {"name", "arguments"}:
            return f"{where}.tool_calls[{j}]: expected exactly {{id, type, function: {{name, arguments}}}}"
        if not isinstance(tc.get("id"), str) or not tc["id"]:
            return f"{where}.tool_calls[{j}].id: missing"
        if tc.get("type") != "function" or not isinstance(fn.get("name"), str):
            return f"{where}.tool_calls[{j}]: expected type 'function' and a function name"
        if not isinstance(fn.get("arguments"), str):
            return f"{where}.tool_calls[{j}].function.arguments: expected a string"
    return None


def _check_message(i: int, msg: Any) -> str | None:
    where = f"messages[{i}]"
    if not isinstance(msg, dict) or msg.get("role") not in ROLES:
        return f"{where}: expected an object with a role in {sorted(ROLES)}"
    unknown = set(msg) - MESSAGE_FIELDS
    if unknown:
        return f"{where}: Additional properties are not allowed ({sorted(unknown)} unexpected)"
    role = msg["role"]
    if "tool_calls" in msg and role != "assistant":
        return f"{where}: only assistant messages may have tool_calls"
    if ("tool_call_id" in msg) != (role == "tool"):
        return f"{where}: tool_call_id is required on tool messages and allowed nowhere else"
    if role == "assistant" and msg.get("tool_calls") is not None:
        return _check_tool_calls(where, msg["tool_calls"]) or _check_content(where, msg.get("content"), optional=True)
    return _check_content(where, msg.get("content"))


def _check_pairing(messages: list[dict[str, Any]]) -> str | None:
    pending: list[str] = []
    for i, msg in enumerate(messages):
        if msg["role"] == "tool":
            if msg["tool_call_id"] not in pending:
                return (f"messages[{i}]: Invalid parameter: messages with role 'tool' must be a response to a "
                        f"preceding message with 'tool_calls' (unknown tool_call_id {msg['tool_call_id']!r})")
            pending.remove(msg["tool_call_id"])
            continue
        if pending:
            return _unanswered(pending)
        pending = [tc["id"] for tc in msg.get("tool_calls") or ()]
    return _unanswered(pending) if pending else None


def _unanswered(pending: list[str]) -> str:
    return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(pending)}")


def _check_tools(tools: Any, required: bool) -> str | None:
    if tools is None:
        return "this server requires a 'tools' list" if required else None
    if not isinstance(tools, list) or not tools:
        return "tools: expected a non-empty list"
    for j, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            return f"tools[{j}]: expected {{type: 'function', function: {{name, parameters}}}}"
        if not isinstance(fn.get("parameters", {}), dict):
            return f"tools[{j}].function.parameters: expected an object"
    return None


def validate_request(body: Any, *, require_tools: bool = False) -> str | None:
    """The reason a real provider would reject this chat-completions request body, or None."""
    if not isinstance(body, dict):
        return "request body: expected a JSON object"
    unknown = set(body) - REQUEST_FIELDS
    if unknown:
        return f"Unrecognized request argument supplied: {', '.join(sorted(unknown))}"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    if body.get("stream"):
        return "the scripted server does not stream"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: expected a non-empty list"
    for i, msg in enumerate(messages):
        problem = _check_message(i, msg)
        if problem:
            return problem
    return _check_pairing(messages) or _check_tools(body.get("tools"), require_tools)


# -- the server --------------------------------------------------------------------------------


class ScriptedOpenAIServer:
    """A strict OpenAI-compatible chat-completions server replaying ``replies`` in order.

    Args:
        replies (list[Reply]): answers, one per valid request (more can be added with :meth:`add`).
        require_tools (bool): reject requests without a ``tools`` list. Defaults to False.

    Attributes:
        url (str): ``http://127.0.0.1:PORT`` (append ``/v1`` for an ``api_base``); set once started.
        requests (list[dict]): body of every request received, in order (rejected ones included).
        log (list[Recorded]): every request with method, path, headers, status and time.
    """

    def __init__(self, replies: list[Reply] | tuple = (), *, require_tools: bool = False):
        self.replies = list(replies)
        self.require_tools = require_tools
        self.log: list[Recorded] = []
        self.url = ""
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._n = 0

    @property
    def requests(self) -> list[Any]:
        return [r.body for r in self.log]

    def model_kwargs(self, api_key: str = "sk-test-scripted-0123456789", **more: Any) -> dict[str, Any]:
        """``model_kwargs`` that point litellm (``model_name="openai/<anything>"``) at this server."""
        return {"api_base": self.url + "/v1", "api_key": api_key, **more}

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        with self._lock:
            self.replies.extend(replies)

    def start(self) -> ScriptedOpenAIServer:
        """Listen on a random loopback port and serve in a daemon thread. Returns self."""
        handler = type("Handler", (_Handler,), {"scripted": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, args=(0.02,), name="scripted-openai", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def answer(self, record: Recorded) -> tuple[int, dict[str, str], dict[str, Any]]:
        """Status, headers and JSON body for one request (called by the handler thread)."""
        with self._lock:
            self.log.append(record)
            if record.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                return 404, {}, error(404, f"unknown path {record.path}").error_body
            problem = validate_request(record.body, require_tools=self.require_tools)
            if problem is None and not self.replies:
                problem = f"scripted server: no reply left (it answered {self._n} requests)"
            if problem is not None:
                return 400, {}, error(400, problem).error_body
            reply = self.replies.pop(0)
            self._n += 1
        if reply.status != 200:
            return reply.status, reply.headers, reply.error_body or {}
        return 200, reply.headers, self._completion(reply, record.body["model"])

    def _completion(self, reply: Reply, model: str) -> dict[str, Any]:
        message = {"role": "assistant", "content": None, **reply.message}
        return {
            "id": f"chatcmpl-scripted-{self._n}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
            "usage": reply.usage if reply.usage is not None else dict(DEFAULT_USAGE),
        }


class SilentProvider:
    """A provider on loopback that reads requests and never answers (``asked`` is set once one
    arrived): a model request in flight for as long as the client waits."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port, self.asked, self.held = self.server.getsockname()[1], threading.Event(), []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            while True:
                connection, _ = self.server.accept()
                self.held.append(connection)
                if connection.recv(65536):
                    self.asked.set()
        except OSError:  # closed
            pass

    def close(self) -> None:
        self.server.close()
        for connection in self.held:
            connection.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers (40 ms on Linux), a latency no real server has.
    disable_nagle_algorithm = True
    scripted: ScriptedOpenAIServer

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        record = Recorded("POST", self.path, self._headers(), body, time=time.monotonic())
        status, headers, payload = self.scripted.answer(record)
        record.status = status
        self._send(status, headers, payload)

    def do_GET(self) -> None:  # noqa: N802
        self.scripted.log.append(Recorded("GET", self.path, self._headers(), None, 404, time.monotonic()))
        self._send(404, {}, error(404, f"unknown path {self.path}").error_body or {})

    def _headers(self) -> dict[str, str]:
        return {key.lower(): value for key, value in self.headers.items()}

    def _send(self, status: int, headers: dict[str, str], payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass
