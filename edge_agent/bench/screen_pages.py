"""The pages of `edge-agent bench screen`, a process of their own (as a kiosk's browser is):
COUNT WebSocket clients of the screen at 127.0.0.1:PORT, speaking the page's protocol (hello,
then a snapshot each time the screen changes). Run by the benchmark:

    python -m edge_agent.bench.screen_pages PORT COUNT

It prints "ready" once every page has its first snapshot; when its standard input closes, it
disconnects and prints one JSON line: for each page, every snapshot as [arrival, {unit id:
length of its heard part}], the arrival on `time.monotonic()` (the machine's one monotonic
clock, the benchmark's too) as soon as the message was read.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

READY_S = 30.0
"""How long the pages wait for their first snapshots before giving up."""


async def _page(port: int, arrivals: list[tuple[float, dict[str, int]]],
                connected: asyncio.Event) -> None:
    async with connect(f"ws://127.0.0.1:{port}/live", max_size=None) as page:
        await page.send(json.dumps({"type": "hello", "token": ""}))
        await _read(page, arrivals, connected)


async def _read(page: ClientConnection, arrivals: list[tuple[float, dict[str, int]]],
                connected: asyncio.Event) -> None:
    async for message in page:
        arrived = time.monotonic()
        snapshot: dict[str, Any] = json.loads(message)
        arrivals.append((arrived, {line["id"]: len(line["heard"])
                                   for line in snapshot["lines"] if line["who"] == "agent"}))
        connected.set()


async def _pages(port: int, count: int) -> list[list[tuple[float, dict[str, int]]]]:
    arrivals: list[list[tuple[float, dict[str, int]]]] = [[] for _ in range(count)]
    connected = [asyncio.Event() for _ in range(count)]
    tasks = [asyncio.create_task(_page(port, arrivals[i], connected[i])) for i in range(count)]
    ready = asyncio.create_task(asyncio.wait_for(
        asyncio.gather(*(event.wait() for event in connected)), READY_S))
    done, _ = await asyncio.wait([ready, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()  # a page that could not connect ends the run with its error
    if ready not in done:
        raise RuntimeError("the screen closed a page before its first snapshot")
    print("ready", flush=True)
    # Standard input closing is the benchmark's "done"; read in a thread, not on this loop.
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return arrivals


def main(argv: list[str]) -> int:
    port, count = int(argv[0]), int(argv[1])
    arrivals = asyncio.run(_pages(port, count))
    print(json.dumps(arrivals), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
