"""Language models. `llama`: llama.cpp on a GGUF file (`LlamaLanguageModel`); `scripted`: replies
from a list; `prompt_budget`: every prompt fitted to the context; `tool_replies`: tool calls by
grammar; `state`: the prompt prefix's state saved and restored; `shared`: other work (a summary)
in the reply model's context; `summary_model`: the summarizer's use of a llama.cpp model;
`native`: the one place that reaches into llama-cpp-python's private parts."""
