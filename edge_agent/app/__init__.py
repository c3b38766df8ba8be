"""Composition root: config -> engines, memory and devices -> conversation. Nothing else builds
parts (`edge_agent.runner` runs what is built here): the engines (`app.engines`), the
conversation around them (`app.conversation`), its memory (`app.memory`), the venue's
knowledge (`app.knowledge`) and the kiosk's screen (`app.screen`)."""

from __future__ import annotations

from edge_agent.app.conversation import (
    ConversationParts,
    build_conversation,
    conversation_parts,
    conversation_settings,
    microphone_processing,
    steered,
    talker_gate,
)
from edge_agent.app.engines import (
    build_engines,
    lan_server,
    load_recognizer,
    load_voice,
    resolve_model,
    resolve_models,
)
from edge_agent.app.knowledge import grounding_settings, open_knowledge
from edge_agent.app.memory import (
    Memory,
    build_summarizer,
    close_memory,
    open_memory,
    sync_credentials,
    venue_sync,
)
from edge_agent.app.screen import build_screen

__all__ = [
    "ConversationParts",
    "Memory",
    "build_conversation",
    "build_engines",
    "build_screen",
    "build_summarizer",
    "close_memory",
    "conversation_parts",
    "conversation_settings",
    "grounding_settings",
    "lan_server",
    "load_recognizer",
    "load_voice",
    "microphone_processing",
    "open_knowledge",
    "open_memory",
    "resolve_model",
    "resolve_models",
    "steered",
    "sync_credentials",
    "talker_gate",
    "venue_sync",
]
