"""The composition root's memory: config -> the summarizer, the memory database with its writer,
the conversation's memory on it, and the copy to the venue's PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from edge_agent.app.conversation import ConversationParts
from edge_agent.config import Config
from edge_agent.config.lan import (
    SYNC_PASSWORD_VARIABLE,
    parse_database_url,
    read_secret,
)
from edge_agent.engines.base import LanguageModel
from edge_agent.engines.llm.fallback import FallbackLanguageModel
from edge_agent.engines.llm.llama import LlamaLanguageModel
from edge_agent.errors import ConfigError
from edge_agent.events import EventLog, Notice
from edge_agent.memory.conversation_memory import (
    ConversationMemory,
    iso,
    utc_now,
)
from edge_agent.memory.record import SessionRecord, session_record
from edge_agent.memory.store import MemoryStore
from edge_agent.memory.summarizer import ExtractiveSummarizer, Summarizer, load_summarizer
from edge_agent.memory.writer import StoreWriter
from edge_agent.memory.writer_lock import WriterLock
from edge_agent.models.catalog import Catalog, load_catalog
from edge_agent.owner import Owner, OwnerThread

if TYPE_CHECKING:
    from edge_agent.sync.central import Credentials
    from edge_agent.sync.worker import VenueSync



@dataclass
class Memory:
    """A run's memory: the conversation's side and the database writer behind it."""

    conversation: ConversationMemory
    writer: StoreWriter
    owner: Owner
    sync: VenueSync | None = None
    """The copy to the venue's PostgreSQL (`[sync] url`), if any."""


def build_summarizer(config: Config, reply_model: LanguageModel,
                     catalog: Catalog | None = None) -> Summarizer:
    """The configured summarizer. An "llm" one with no summarizer_model runs in the reply
    model's own context (`LlamaSummarizer(shared=...)`: the model in memory once; with a LAN
    server, the on-device model's); with a
    summarizer_model it loads that (blocking); with a scripted reply model and no
    summarizer_model there is no model to run: summaries are extractive."""
    memory = config.memory
    model_path = None
    shared = None
    if memory.summarizer == "llm":
        if memory.summarizer_model:
            catalog = catalog or load_catalog(config.models_dir)
            model_path = catalog.resolve(memory.summarizer_model, "llm",
                                         "memory.summarizer_model", config.source)
        elif isinstance(reply_model, LlamaLanguageModel):
            shared = reply_model.llama
        elif isinstance(reply_model, FallbackLanguageModel) and isinstance(
                reply_model.local, LlamaLanguageModel):
            # Summaries stay on the kiosk: the on-device model, in its context.
            shared = reply_model.local.llama
        else:
            return ExtractiveSummarizer(max_chars=memory.summary_chars)
    # One thread: summaries are background work, and llama.cpp's worker threads spin-wait on
    # each other, so two of them next to the recognizer and the voice on 2 cores both slow the
    # agent and take up to ~170 ms to notice the stop (one thread: ~30 ms).
    return load_summarizer(memory.summarizer, model_path=model_path, source=config.source,
                           key="memory.summarizer", threads=1, max_chars=memory.summary_chars,
                           shared=shared)


async def open_memory(config: Config, parts: ConversationParts, log: EventLog,
                      engines: dict[str, str], summarizer: Summarizer,
                      db_path: Path | None = None, lock: WriterLock | None = None,
                      venue: bool = False) -> Memory:
    """Open the memory database (exit 8 with one line if it cannot be used) and the
    conversation's memory on it; old event logs expire. `lock`: the database's writer lock,
    if the caller took it already (else the store takes it: exit 9 if another writer has it).
    `venue`: copy it to `[sync] url`'s PostgreSQL, if the config names one (the live agent's
    database; a demo's private one is not a kiosk's)."""
    owner = OwnerThread("store")
    try:
        store = await owner.call(lambda: MemoryStore.open(db_path or config.db_path, lock=lock))
    except BaseException:
        owner.close()
        raise
    def warn(text: str) -> None:
        log.publish(Notice(text))

    writer = StoreWriter(store, owner, log.clock, warn=warn)
    cutoff = iso(utc_now() - timedelta(days=config.memory.retention_days))
    writer.submit(lambda s: s.expire_events(cutoff), durable=False, what="expire old logs")
    conversation = ConversationMemory(parts.settings.memory, log, writer=writer,
                                      summarizer=summarizer, engines=engines)
    sync = None
    if venue and config.sync.url:
        publish = log.publisher()
        loop = asyncio.get_running_loop()

        def taken() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed while the sync stops
                loop.call_soon_threadsafe(conversation.reload_preload)

        sync = venue_sync(config, db_path or config.db_path,
                          notify=lambda text: publish(Notice(text)), on_taken=taken)
        try:
            await asyncio.to_thread(sync.start)
        except BaseException:
            await writer.close()
            owner.close()
            raise
    return Memory(conversation, writer, owner, sync)


async def close_memory(memory: Memory) -> SessionRecord:
    """Commit what is queued, read the run's record back from the database, close it."""
    conversation = memory.conversation
    try:
        return await memory.writer.read(
            lambda store: session_record(store, conversation.session_ids, conversation.run_id))
    finally:
        await memory.writer.close()
        memory.owner.close()
        if memory.sync is not None:  # after the last writes: they are queued for it
            await asyncio.to_thread(memory.sync.close)


def venue_sync(config: Config, db_path: Path, notify: Callable[[str], None] = lambda text: None,
               on_taken: Callable[[], None] = lambda: None) -> VenueSync:
    """The copy of the database at `db_path` to the venue's PostgreSQL `[sync] url` names
    (not started)."""
    from edge_agent.sync.outbox import Outbox
    from edge_agent.sync.worker import SyncSettings, VenueSync

    sync = config.sync
    settings = SyncSettings(sync_credentials(config), config.memory.identity,
                            sync.interval_ms / 1000, sync.batch_rows, sync.max_backlog)
    return VenueSync(settings, Outbox.open(db_path), notify, on_taken)


def sync_credentials(config: Config) -> Credentials:
    """How to reach `[sync] url`: its address, the password (file or environment) and this
    kiosk's id. ConfigError if the sync extra (psycopg) is not installed."""
    try:
        from edge_agent.sync.central import Credentials
    except ImportError as exc:
        raise ConfigError(config.source, "sync.url", f"needs the PostgreSQL client ({exc}): "
                          "pip install 'edge-agent[sync]'") from None
    sync = config.sync
    password = read_secret(sync.password_file, SYNC_PASSWORD_VARIABLE, config.source,
                           "sync.password_file", "the database password")
    return Credentials(parse_database_url(sync.url, config.source), password or None,
                       sync.kiosk_id or socket.gethostname(), sync.timeout_ms)
