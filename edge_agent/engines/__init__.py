"""Engines behind small interfaces: VAD, speech-to-text, language model, text-to-speech."""
