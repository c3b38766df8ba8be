"""Run as `python -m tests.lan_client_child URL TIMEOUT_S`: one reply from the LAN server
through the kiosk's client, in a process of its own so that a test can measure its memory and
time from outside. Prints one JSON line: how it ended ("reply", "unavailable" or "failed"),
the seconds to the first piece or the failure, the reply's length in characters, its pieces;
then waits for a line on stdin before it exits (so that the test can read its memory's high
water mark from /proc meanwhile)."""

from __future__ import annotations

import json
import sys
import time

from edge_agent.config.lan import parse_server_url
from edge_agent.engines.llm.server import ServerLanguageModel, ServerUnavailable
from edge_agent.errors import EngineError


def main(url: str, timeout_s: float) -> None:
    model = ServerLanguageModel(parse_server_url(url), timeout_s=timeout_s, max_tokens=120,
                                temperature=0.3, seed=7)
    began = time.monotonic()
    first: float | None = None
    text, pieces, ended = "", 0, "reply"
    try:
        for piece in model.stream([{"role": "user", "content": "Hi"}]):
            first = time.monotonic() - began if first is None else first
            text += piece
            pieces += 1
    except ServerUnavailable:
        ended = "unavailable"
    except EngineError:
        ended = "failed"
    print(json.dumps({"ended": ended, "seconds": first if first is not None
                      else time.monotonic() - began, "chars": len(text), "pieces": pieces}),
          flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
