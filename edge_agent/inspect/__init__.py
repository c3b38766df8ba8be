"""`edge-agent inspect`: a session drawn as one self-contained HTML page.

`source` reads the session (memory database or record file), `timeline` turns it into what is
drawn (`model`), `page` and `strip` draw it.
"""
