"""The conversation loop: turn detection, barge-in, replies, history."""
