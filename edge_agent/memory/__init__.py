"""Conversation memory: heard history and prompt assembly (SQLite persistence comes later)."""
