"""The scripted caller: call files, and a caller that speaks them into a virtual microphone."""
