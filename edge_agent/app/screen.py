"""The composition root's screen: config -> the kiosk's screen server for a conversation."""

from __future__ import annotations

from edge_agent.config import Config
from edge_agent.config.lan import parse_listen
from edge_agent.conversation.agent import Conversation
from edge_agent.events import EventLog
from edge_agent.screen.captions import Captions, ScreenState
from edge_agent.screen.server import ScreenServer
from edge_agent.service.activation import inherited_socket

SCREEN_SOCKET_NAME = "screen"
"""FileDescriptorName= of the socket systemd listens on for the screen (the service's
`edge-agent-screen.socket`)."""


def build_screen(config: Config, conversation: Conversation, log: EventLog) -> ScreenServer | None:
    """The screen `[screen]` asks for, following `log` and showing `conversation`'s speaker
    (not yet listening: `ScreenServer.start`), on the socket systemd opened for it if it did
    (the service), else at `[screen] listen`; None when it is off."""
    screen = config.screen
    if not screen.enabled:
        return None
    idle: ScreenState = "listening" if config.session.start == "immediate" else "waiting"
    server = ScreenServer(parse_listen(screen.listen, config.source), screen.token,
                          Captions(log.clock, screen.clear_after_s, idle, screen.push_to_talk),
                          conversation.now_playing, conversation.stop_by_touch,
                          inherited_socket(SCREEN_SOCKET_NAME),
                          words=conversation.caller_words,
                          talk=conversation.talk if screen.push_to_talk else None)
    server.follow(log)
    return server
