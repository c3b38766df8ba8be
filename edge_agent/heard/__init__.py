"""Pure heard-truth logic: word timings, truncation to the heard prefix, the unit ledger.

Nothing here does I/O or reads a clock; the conversation loop feeds it positions.
"""

from edge_agent.heard.ledger import Finalize, Unit, UnitLedger
from edge_agent.heard.timings import PhonemeWord, WordTiming, align_words, split_phoneme_words
from edge_agent.heard.truncation import HeardPolicy, heard_prefix

__all__ = [
    "Finalize",
    "HeardPolicy",
    "PhonemeWord",
    "Unit",
    "UnitLedger",
    "WordTiming",
    "align_words",
    "heard_prefix",
    "split_phoneme_words",
]
