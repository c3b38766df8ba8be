"""The venue's knowledge: what a kiosk answers from its venue's own files, exactly, and the
fallback line for what they do not cover.

- `sources` reads the files (`markdown`, CSV, `toml_source`) into `entries`; `hours` holds
  opening hours and answers them on the clock;
- `text` turns words into terms (stems, synonyms), the same for files and callers;
- `index` keeps the entries in the memory database with a full-text index (FTS5);
- `asking` tells a question from small talk; `ground` decides how a turn is answered (an
  entry said as written, the opening hours, the model with entries in its prompt, or the
  fallback line);
- `live` is the running agent's knowledge (read again when a file changes), `check` what
  `edge-agent knowledge check` warns about.
"""
