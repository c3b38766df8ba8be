"""What kind of turn a caller's words are: a question for the venue, small talk, or an answer
to the agent.

Only a question may get the venue's fallback line ("I'm not sure — please ask at the desk"):
small talk ("hi", "thanks", "how are you", "can you repeat that?") and a caller's answer to
the agent's own question ("four people") go to the model, as before. A question is: words
ending in "?", a question word or an inverted verb first ("where", "is there", "can I"), a
request for information ("tell me", "I'd like to know", "I need"), or a short fragment naming
a topic ("parking?", "menu for vegan") when the agent did not just ask something.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edge_agent.knowledge.text import fold, word_set, words

_QUESTION_WORDS = word_set(
    "what when where which who whom whose why how is are was were do does did can could may "
    "might will would should shall have has am")
_ASKING = ("tell me", "i want", "i would like", "i need", "i am looking for", "looking for",
           "is there", "are there", "do you have", "do you know", "i wonder", "wondering",
           "any idea", "information about", "info about", "what about", "how about",
           "i would love to know", "show me", "explain")
_FILLERS = (
    r"good (?:morning|afternoon|evening|day|night)", r"(?:hi|hello|hey|hiya|howdy)(?: there)?",
    r"thank you(?: (?:so|very) much)?", r"thanks(?: a lot)?", r"cheers", r"(?:good)?bye",
    r"see you(?: later)?", r"have a (?:nice|good|great) (?:day|evening|one)", r"excuse me",
    r"please", r"(?:sorry|pardon)(?: me)?", r"never mind", r"hold on", r"hang on", r"stop",
    r"wait(?: a (?:moment|minute|second))?", r"one (?:moment|second|minute)", r"actually",
    r"that is (?:all|it|great|fine|perfect)",
    r"(?:okay|ok|alright|all right|sure|yes|yeah|yep|no|nope|great|perfect|cool|nice|wonderful|"
    r"lovely|fine|good|got it|i see|understood|um|uh|er|erm|hmm|well|so)",
)
"""Said around a question or on their own; taken out before a turn is read."""
_CHAT = (
    r"how are you(?: doing)?(?: today)?", r"how is it going", r"what is up", r"who are you",
    r"what are you", r"are you (?:a |an )?(?:robot|human|person|computer|machine|ai|real|bot)",
    r"what is your name", r"what can you do", r"(?:can|could) you help(?: me)?",
    r"what do you do", r"(?:can|could) you (?:repeat|say) (?:that|it)(?: again)?",
    r"repeat (?:that|it)", r"say (?:that|it) again", r"what did you (?:just )?say",
    r"come again", r"i did not (?:catch|hear|get) (?:that|it|you)",
    r"(?:my name is|call me|i am called|this is) [a-z]+(?: [a-z]+)?",
)
"""Small talk a turn may be, whole: for the model, never for the fallback line."""
_FILLERS_RE = re.compile(r"\b(?:" + "|".join(_FILLERS) + r")\b")
_CHAT_RE = re.compile(r"(?:" + "|".join(_CHAT) + r")(?: (?:" + "|".join(_CHAT) + r"))*")
_FOLLOW_UPS = ("and ", "what about ", "how about ", "and for ", "also ", "and what about ",
               "and on ", "and at ", "what if ")
FRAGMENT_WORDS = 4
"""A turn this short that names a topic is asking about it ("the parking?")."""


@dataclass(frozen=True)
class TurnKind:
    """How a turn reads, before anything is looked up."""

    question: bool
    """It asks for information (the fallback line may answer it)."""
    small_talk: bool
    """Nothing but greetings, thanks, "how are you", "repeat that" and the like."""
    follow_up: bool
    """It leans on the turn before ("and on Sunday?", "what about children?")."""
    rest: str
    """The words with the small talk taken out ("Hi, where is the toilet?" -> "where is the
    toilet")."""


MISHEARD_STARTS = {"were": "where", "wear": "where", "ware": "where", "wat": "what",
                   "wen": "when", "hows": "how is"}
"""A question word as recognizers write it at the start of a turn ("wear are the toilets")."""


def turn_kind(text: str, agent_asked: bool) -> TurnKind:
    """`text` classified; `agent_asked`: the agent's last heard words were a question."""
    said = words(text)
    if said and said[0] in MISHEARD_STARTS:
        said = [*MISHEARD_STARTS[said[0]].split(), *said[1:]]
    folded = " ".join(said)
    rest = re.sub(r"\s+", " ", _FILLERS_RE.sub(" ", folded)).strip()
    spoken = rest.split()
    small_talk = not spoken or _CHAT_RE.fullmatch(rest) is not None
    ends_asking = fold(text).rstrip().endswith("?")
    first = spoken[0] if spoken else ""
    asking = (ends_asking or first in _QUESTION_WORDS
              or any(f" {p} " in f" {rest} " for p in _ASKING))
    fragment = 0 < len(said) <= FRAGMENT_WORDS and not agent_asked
    follow_up = any(f"{folded} ".startswith(p) for p in _FOLLOW_UPS) or (
        ends_asking and 0 < len(said) <= 3)
    return TurnKind(question=not small_talk and (asking or fragment), small_talk=small_talk,
                    follow_up=follow_up, rest=rest)
