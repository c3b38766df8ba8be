"""The composition root's knowledge: config -> the venue's knowledge, indexed in the memory
database, with the settings its lookups use."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from edge_agent.config import Config
from edge_agent.knowledge.ground import GroundingSettings
from edge_agent.knowledge.index import KnowledgeIndex
from edge_agent.knowledge.live import VenueKnowledge, Wall
from edge_agent.memory.conversation_memory import utc_now


def grounding_settings(config: Config, tool_names: Iterable[str] = ()) -> GroundingSettings:
    """The lookups' settings, all from `config`; `tool_names`: the tools the model may call
    (a question about them is the model's: "can I book a table?")."""
    knowledge = config.knowledge
    return GroundingSettings(
        fallback=knowledge.fallback, direct=knowledge.direct,
        direct_above=knowledge.direct_above, margin=knowledge.margin,
        relevant_above=knowledge.relevant_above, passages=knowledge.passages,
        prompt_tokens=knowledge.prompt_tokens, clock=knowledge.clock,
        timezone=knowledge.timezone,
        tools=tuple(name.replace("_", " ") for name in tool_names))


def open_knowledge(config: Config, db_path: Path | None, tool_names: Iterable[str] = (),
                   wall: Wall = utc_now) -> VenueKnowledge | None:
    """The venue's knowledge `[knowledge] files` names, read and indexed (blocking: the files
    are read, and what changed since the last run is indexed) in the memory database at
    `db_path` (else in this process only); None when no files are named. ConfigError naming
    the file and line for a file that cannot be read."""
    if not config.knowledge.files:
        return None
    index = KnowledgeIndex.open(db_path) if db_path is not None else KnowledgeIndex.in_memory()
    knowledge = VenueKnowledge(config.knowledge_files, index,
                               grounding_settings(config, tool_names), wall)
    try:
        knowledge.load()
    except BaseException:
        knowledge.close()
        raise
    return knowledge
