"""Audio I/O: the microphone and speaker interfaces, a clock-paced virtual pair, and PyAudio."""
