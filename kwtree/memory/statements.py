"""What a first-person sentence states that lasts: its clauses, and the durable facts each one
states about the speaker (or about a person the speaker names).

:func:`clauses` splits a sentence at its conjunctions ("and", "but", "plus", ";", ", I ...")
into clauses, each a first-person statement of its own: "I live in Boston and I work as a
nurse" gives two; a clause that left its subject out takes the one before it ("I'm vegetarian
and allergic to peanuts" -> "I'm vegetarian", "I'm allergic to peanuts"; "I quit the hospital
and started at Stripe" -> "I started at Stripe") when the clause, so completed, states a fact.
A piece that is no first-person statement ("and it was great", "Tom and Jerry") stays with the
clause before it, and a sentence with fewer than two first-person clauses stays whole.

:func:`statements` reads one clause with the general English patterns below; each
:class:`Statement` names what it is about: an attribute of ``kwtree.memory.candidates.ATTRIBUTES``
(one value at a time) or an aspect of ``ASPECTS`` (many values). The patterns read the pronoun in any
case and texting spellings ("i'm", "im", "ive"):

- name: "my name is X", "I'm called X", "(Hi,) I'm X" (a capitalised name closing its clause);
  age: "I'm 34 (years old)"; origin: "I'm (originally) from X".
- home: "I live / we live / I'm based in X"; indirectly "since / after moving to X", "I (just)
  moved / relocated to X", "we got / bought / rented a flat (house, place ...) in X", "the new
  place / apartment / house in X". A planned move ("thinking of moving to X", "we're moving to
  X") is a plan, not a home.
- job and employer: "I work as X", "I work at / for Y", "I'm a X (at Y)", "I started / start
  (as X) (at Y)", "I joined Y (as X)", "I got a job / hired (as X) (at Y)", "I got promoted to
  X", "my new job / role (...) at Y", "my new boss / manager / team at Y" (Y any) and "my boss
  at Y" (Y a capitalised name); "I quit / left my job / the <workplace>", "I got laid off / fired",
  "I lost my job" set the employer to "none"; "I'm retired" / "I retired" the job to "retired".
- school: "I study (...) at X", "I'm a student / freshman / ... at X", "I go to / attend X
  University / College / School".
- relationship: "my wife / husband" (married), "my fiancé(e)", "we got engaged", "he / she
  proposed" (engaged), "my girlfriend / boyfriend / partner", "I'm dating" (in a
  relationship), "we broke up / split up", "I'm single" (single), "we separated" (separated),
  "I got divorced", "the divorce was finalized" (divorced).
- diet: "I'm (a) vegetarian / vegan / keto ...", "I went / turned / became vegan", "I'm on /
  doing keto", "I'm no longer vegan", "I gave up keto", "I eat meat again".
- allergy: "I'm (severely) allergic to X", "my X allergy", "I have an X allergy"; health: "I
  have / suffer from / live with / was diagnosed with <a condition>", "my asthma ...", "I'm
  diabetic / pregnant / lactose intolerant"; pet: "we have / got / adopted a dog (named X)";
  family: "I have two kids / a sister", "I'm a mom of three", "we're expecting a baby".
- tool: "I (always) use X", "I'm using X", "I switched (from Y) to X"; plan: "I'm planning /
  going / hoping / about to X", "I'm thinking of / about X", "I plan / intend to X", "we're
  moving to X".
- another person: "my <relation> (Name) lives in / moved to / works as / works at / is a / is
  from / loves / hates / is allergic to X": a statement about that person, never the speaker.

What the patterns miss: facts told without a first-person word ("PM at Stripe, live in
Oakland" as a fragment states the home but not the job), values they cannot bound (a job of
more than six words), conditions outside :data:`CONDITIONS`, diets outside :data:`DIETS`, and
negation or the past ("I used to live in Rome" is still read as a home, "I never worked at X"
is not a job and is skipped only when "never" / "not" comes right before the verb).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from kwtree.memory.candidates import ATTRIBUTES

__all__ = ["CONDITIONS", "DIETS", "RELATIONS", "SENTENCE_END", "Statement", "clauses", "led_by_someone_else", "phrase",
           "sentences", "statements"]


@dataclass(frozen=True, slots=True)
class Statement:
    """One durable fact a clause states: ``about`` an attribute (ATTRIBUTES) or an aspect
    (ASPECTS), its ``value``, the ``rule`` that found it (a key of ``extract.CONFIDENCE``),
    ``subject`` None for the speaker or another person's label ("sister", "Tom"), and
    ``detail``: more fields for the candidate's facts ("relation", "partner", "ended",
    "replaces")."""

    about: str
    value: str
    rule: str
    subject: str | None = None
    detail: Mapping[str, str] = field(default_factory=dict)

    @property
    def single(self) -> bool:
        """Whether the fact holds one value at a time (its ``about`` is an attribute)."""
        return self.about in ATTRIBUTES


# --- phrases --------------------------------------------------------------------------------

#: The longest value a rule takes, in words.
MAX_PHRASE_WORDS = 6
CLAUSE_END = re.compile(r"[,.;:!?()\"]| - | and | but | because | so | which | who | since | when | while | or "
                        r"| (?=(?:i|i'm|i've|i'd|we|we're|we've)\s)", re.IGNORECASE)
#: A value also ends at a preposition: "an engineer at a bank" -> "engineer".
VALUE_END = re.compile(CLAUSE_END.pattern + r"| (?:at|in|for|with|from|on|near|since|by) ", re.IGNORECASE)
#: An organisation's or a place's name ends at a preposition of place or time, not at "for".
_NAME_END = re.compile(CLAUSE_END.pattern + r"| (?:in|as|since|from|on|near|now|last|this|next|after|until|with|for|is|"
                       r"are|was|were|has|have|had|will|would|does|did|keeps|seems|says) ", re.IGNORECASE)
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TRAILING = _words("a an the to of for in on at with my your so too really very much lately now here there")


def phrase(rest: str, end: re.Pattern[str] = CLAUSE_END) -> str:
    """The start of ``rest`` up to the end of its clause (or ``end``), at most MAX_PHRASE_WORDS
    words, without trailing filler."""
    words = end.split(rest, maxsplit=1)[0].split()[:MAX_PHRASE_WORDS]
    while words and words[-1].lower() in _TRAILING:
        words.pop()
    return " ".join(words).strip(" '\"")


# --- sentences and clauses ------------------------------------------------------------------

#: Where a sentence ends: after ".", "!" or "?" and a space, or at a line break.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, empty ones left out."""
    return [part.strip() for part in SENTENCE_END.split(text) if part and part.strip()]


_FIRST_PERSON = re.compile(r"(?<![\w'])(?:i|i'm|i've|i'd|i'll|im|ive|we|we're|we've|we'll|my|our|me)(?![\w'])",
                           re.IGNORECASE)
_JOIN = re.compile(r"\s*;\s*|,?\s+(?:and|but|plus)\s+(?:(?:then|also|now|so|just)\s+)?"
                   r"|,\s+(?:(?:and|but|so|now|then|also)\s+)?(?=(?:i|i'm|i've|im|we|we're|we've|my|our)(?![\w']))",
                   re.IGNORECASE)
_OPENER = re.compile(r"(?<![\w'])(?P<subject>i|we)(?P<aux>'m|'re|'ve been|'ve| am| are| was| were| have been| have)?"
                     r"(?![\w'])|(?<![\w'])(?P<texted>im|ive)(?![\w'])", re.IGNORECASE)


def clauses(sentence: str, states: Callable[[str], bool]) -> list[str]:
    """``sentence`` split into its first-person clauses (see the module), each verbatim or
    completed with the subject of the clause before it when ``states`` (given the clause with
    straight apostrophes) says the completed clause states a fact; ``[sentence]`` when it
    holds fewer than two."""
    plain = sentence.replace("\u2019", "'")  # one character for one: positions stay
    spans: list[tuple[int, int, int]] = []  # (where its joiner starts, where it starts, where it ends)
    start = joined = 0
    for cut in _JOIN.finditer(plain):
        spans.append((joined, start, cut.start()))
        joined, start = cut.start(), cut.end()
    spans.append((joined, start, len(plain)))
    if len(spans) < 2:
        return [sentence]
    found: list[list[str]] = []  # [the clause, the same with straight apostrophes, "own" | "completed" | ""]
    for joined, start, end in spans:
        piece = plain[start:end]
        opener = _opener(found[-1][1], states, piece) if found and found[-1][2] and piece.strip() else None
        # a piece with a first-person word of its own is its own clause, unless it does not lead
        # with it and the subject before completes it ("... and founded X, which is me")
        if len(piece.split()) > 1 and _FIRST_PERSON.search(piece) and not (found and _compound(found[-1][1], piece)) \
                and (opener is None or _FIRST_PERSON.match(piece.lstrip())):
            found.append([sentence[start:end], piece, "own"])
            continue
        if opener is not None:
            said = found[-1][0][opener[0]:opener[1]]
            text = f"{said} {sentence[start:end].strip()}"
            found.append([text, text.replace("\u2019", "'"), "completed"])
        elif found:
            found[-1][0] += sentence[joined:end]
            found[-1][1] += plain[joined:end]
        else:
            found.append([sentence[start:end], piece, ""])
    if sum(1 for *_, kind in found if kind) < 2:
        return [sentence]
    if not found[0][2]:  # a leading piece that is no statement joins the first one
        found[1][0] = found[0][0] + sentence[spans[1][0]:spans[1][1]] + found[1][0]
        found.pop(0)
    return [text.strip() for text, *_ in found]


_SUBJECT = re.compile(r"(?<![\w'])(?:i|i'm|i've|im|ive|we|we're|we've)(?![\w'])", re.IGNORECASE)


def _compound(before: str, piece: str) -> bool:
    """Whether "<before> and <piece>" is one clause with a compound subject: "my wife and I
    went hiking", "Tom and I met" (a short piece without a subject of its own, then "I")."""
    return (re.match(r"\s*(?:i|me)(?![\w'])", piece, re.IGNORECASE) is not None and len(before.split()) <= 3
            and _SUBJECT.search(before) is None)


def _opener(before: str, states: Callable[[str], bool], piece: str) -> tuple[int, int] | None:
    """Where, in the clause ``before``, the subject (and auxiliary) is that completes
    ``piece`` so that ``states`` says it states a fact: "allergic to peanuts" after "I'm
    vegetarian" is "I'm allergic to peanuts"."""
    opener = _OPENER.search(before)
    if opener is None:
        return None
    tries = [opener.span()]
    if opener["aux"]:
        tries.append(opener.span("subject"))
    for start, end in tries:
        if states(f"{before[start:end]} {piece.strip()}"):
            return start, end
    return None


# --- the patterns -----------------------------------------------------------------------------

_I = r"(?<![\w'])(?:i|we)"  # the speaker as subject ("we" includes them)
_IM = r"(?<![\w'])(?:i'm|i am|im|we're|we are)"
_BEEN = r"(?:" + _IM + r"|" + _I + r"(?:'ve| have) been)"  # "I'm vegan", "I've been vegan"
_ADV = (r"(?:\s+(?:now|currently|still|actually|also|just|finally|officially|recently|already|fully|mostly|strictly|"
        r"seriously|severely|really|totally|pretty|very|super|kinda|basically|technically|newly|both|always|usually|"
        r"often|mainly|normally|typically|generally|only|exclusively))*")
DIETS = ("vegetarian", "vegan", "pescatarian", "pescetarian", "keto", "ketogenic", "paleo", "carnivore", "kosher",
         "halal", "gluten-free", "gluten free", "dairy-free", "dairy free", "plant-based", "plant based", "low-carb",
         "low carb", "flexitarian", "whole30", "omnivore", "raw vegan", "lacto-vegetarian", "intermittent fasting")
_DIET = "(?:" + "|".join(sorted(DIETS, key=len, reverse=True)) + ")"
_DIET_END = r"(?=\s*$|\s*[,.;!?)]|\s+(?:now|again|these days|nowadays|for|since|and|but|so|too|though|lately|" \
            r"already|anymore|any more|diet|mostly|at home|last|this|in|since|ever|about|a few|after|until)\b)"
CONDITIONS = ("asthma", "diabetes", "type 1 diabetes", "type 2 diabetes", "arthritis", "rheumatoid arthritis",
              "migraines", "migraine", "celiac disease", "celiac", "coeliac", "crohn's", "crohn's disease", "ibs",
              "adhd", "add", "autism", "anxiety", "depression", "ptsd", "ocd", "bipolar disorder", "insomnia",
              "sleep apnea", "hypertension", "high blood pressure", "high cholesterol", "acid reflux", "gerd",
              "epilepsy", "eczema", "psoriasis", "tinnitus", "a bad back", "back pain", "a bad knee", "chronic pain",
              "fibromyalgia", "lupus", "multiple sclerosis", "ms", "cancer", "long covid", "hay fever", "allergies",
              "gout", "anemia", "hypothyroidism", "pcos", "endometriosis", "vertigo", "a heart condition",
              "heart disease", "dyslexia", "a concussion", "tendinitis", "sciatica", "scoliosis", "plantar fasciitis",
              "kidney stones", "a broken wrist", "a broken arm", "a broken leg", "covid", "the flu", "shingles")
_CONDITION = "(?:" + "|".join(re.escape(c) for c in sorted(CONDITIONS, key=len, reverse=True)) + r")(?![\w'])"
_STATES_OF_HEALTH = ("diabetic", "asthmatic", "epileptic", "pregnant", "anemic", "autistic", "dyslexic", "deaf",
                     "colorblind", "colourblind", "sober", "in recovery", "immunocompromised", "lactose intolerant",
                     "gluten intolerant")
RELATIONS = ("best friend", "friend", "sister", "brother", "mom", "mum", "mother", "dad", "father", "son", "daughter",
             "wife", "husband", "partner", "boyfriend", "girlfriend", "cousin", "aunt", "uncle", "grandma",
             "grandmother", "grandpa", "grandfather", "niece", "nephew", "boss", "manager", "colleague", "coworker",
             "co-worker", "teacher", "mentor", "neighbor", "neighbour", "roommate", "flatmate", "fiancé", "fiance",
             "fiancée", "kid", "son-in-law", "daughter-in-law", "sister-in-law", "brother-in-law", "stepmom",
             "stepdad", "ex", "dog", "cat", "puppy", "kitten", "cofounder", "co-founder", "housemate", "mate",
             "buddy", "client", "landlord", "landlady", "bestie", "classmate", "teammate")
_RELATION = "(?:" + "|".join(re.escape(r) for r in sorted(RELATIONS, key=len, reverse=True)) + ")"
_PETS = r"(?:dog|cat|puppy|pup|kitten|rabbit|bunny|hamster|parrot|bird|horse|guinea pig|tortoise|turtle|lizard|" \
        r"snake|ferret|goldfish|fish|dogs|cats|puppies|kittens|rabbits)"
_KIN = r"(?:kids?|children|child|sons?|daughters?|boys|girls|brothers?|sisters?|siblings?|grandkids|grandchildren|" \
       r"grandsons?|granddaughters?|twins|stepkids|stepsons?|stepdaughters?)"
_WORKPLACE = r"(?:company|firm|hospital|school|district|agency|office|bank|restaurant|startup|start-up|lab|studio|" \
             r"practice|store|shop|clinic|team|job|university|newspaper|magazine|bakery|salon|gym|factory|warehouse)"
_PARTNER = r"(?:wife|husband|spouse|fianc[ée]e?|fiance|girlfriend|boyfriend|partner|gf|bf)"
#: A home named by what it is: "a little two-bed", "an apartment", "our new house".
_DWELLING = r"(?:a |an |the |our |my )?(?:[\w-]+ ){0,3}?(?:place|apartment|apt|flat|house|home|condo|studio|cabin|" \
            r"cottage|bungalow|townhouse|rowhome|rowhouse|loft|room|share house|houseshare|duplex|two-bed|one-bed|" \
            r"1br|2br|3br|rental)"
#: Working for oneself, however it is said.
_SELF_EMPLOYED = r"(?:freelance|freelancing|a freelancer|freelancer|contracting|a contractor|self-employed|independent)"


@dataclass(frozen=True, slots=True)
class _Rule:
    """A pattern whose named groups that are an attribute or kind (or "ended", "partner",
    "replaces") give the statement's value and detail; ``fixed`` gives values no group holds;
    ``named`` lists the groups that must hold a capitalised name."""

    pattern: re.Pattern[str]
    rule: str
    fixed: Mapping[str, str] = field(default_factory=dict)
    named: tuple[str, ...] = ()


def _rule(pattern: str, rule: str, fixed: Mapping[str, str] | None = None, named: tuple[str, ...] = ()) -> _Rule:
    return _Rule(re.compile(pattern, re.IGNORECASE), rule, fixed or {}, named)


_JOB_AT = r"(?: as (?:an? |the )?(?P<job>.+?))?(?: (?:at|for) (?P<employer>.+))?$"
_RULES: tuple[_Rule, ...] = (
    _rule(r"\bmy name is\s+(?P<name>.+)", "profile.explicit", named=("name",)),
    _rule(_IM + r" called\s+(?P<name>.+)", "profile.explicit", named=("name",)),
    _rule(_IM + r"\s+(?P<age>\d{1,3})(?:\s+years?\s+old)?(?![\w%$.,:]\d|\s*(?:%|am\b|pm\b|minutes|hours|days|weeks|"
          r"months|times|percent|kg|km|miles|lbs|pounds|dollars|mins|hrs|k\b))", "profile.explicit"),
    _rule(_I + _ADV + r" (?:work|am working|'m working) as (?:an? )?(?P<job>.+?)(?: (?:at|for) (?P<employer>.+))?$",
          "profile.explicit"),
    _rule(_I + _ADV + r" (?:work|am working|'m working) (?:at|for) (?P<employer>.+)", "profile.explicit"),
    _rule(_I + _ADV + r" (?:live|am living|'m living|are living|'re living) in " + _DWELLING
          + r" (?:in|on|near|outside) (?P<home>.+)", "profile.explicit"),
    _rule(_I + _ADV + r" (?:live|am living|'m living|are living|'re living) in (?P<home>.+)", "profile.explicit"),
    _rule(_IM + _ADV + r" based (?:in|out of) (?P<home>.+)", "profile.explicit"),
    _rule(_IM + r"(?: originally)? from (?P<origin>.+)", "profile.explicit"),
    # indirect: a move that happened, a new home named by its place
    _rule(r"\b(?:since|after) (?:moving|relocating|i moved|we moved|i relocated|we relocated)(?: back)? to "
          r"(?P<home>.+)", "profile.implied"),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:moved|relocated)(?: back| over)? to (?P<home>.+)", "profile.change"),
    _rule(r"\bnew (?:place|apartment|apt|flat|house|home|condo|studio) (?:is )?in (?P<home>.+)", "profile.implied"),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:got|bought|rented|found|moved into|signed a lease on|closed on) "
          + _DWELLING + r" (?:together )?(?:in|on|near|outside) (?P<home>.+)", "profile.implied"),
    # work: starting, joining, leaving
    _rule(_I + _ADV + r" (?:started|start|began|am starting|'m starting|will start|'ll start)(?: a new job| a new "
          r"role| work| working| my new job| my new role)?" + _JOB_AT, "profile.change"),
    _rule(_I + _ADV + r" joined (?P<employer>.+?)(?: as (?:an? )?(?P<job>.+))?$", "profile.change",
          named=("employer",)),
    _rule(_I + _ADV + r" (?:got|landed|accepted|took) (?:a job|hired|a position|an offer|the job|a new job|the offer)"
          + _JOB_AT, "profile.change"),
    _rule(_I + _ADV + r" (?:got|landed|accepted|took|started) (?:a|an|the|my) (?:new )?(?P<job>[\w-]+(?: [\w-]+)?) "
          r"(?:job|position|role|gig) (?:at|with|for) (?P<employer>.+)", "profile.change"),
    _rule(_I + _ADV + r" (?:teach|am teaching|'m teaching)(?: [\w-]+){0,3}? at (?P<employer>.+)", "profile.explicit",
          {"job": "teacher"}),
    _rule(r"(?:" + _IM + r"|" + _I + r"(?:'ve| have)?" + _ADV + r" (?:went|gone|go|turned|am going|'m going))" + _ADV
          + r" (?:full |full-time |fully )?" + _SELF_EMPLOYED + r"\b", "profile.change", {"employer": "self-employed"}),
    _rule(_I + _ADV + r" (?:founded|co-founded|cofounded) (?P<employer>.+)", "profile.change", named=("employer",)),
    _rule(_I + _ADV + r" (?:got|was|have been|'ve been|am|'m) promoted to (?P<job>.+)", "profile.change"),
    _rule(r"\bmy new (?:job|role|position|gig)(?: [^,.;!?]{0,40}?)? at (?P<employer>.+)", "profile.implied"),
    _rule(r"\bmy new (?:boss|manager|team|coworkers|co-workers|colleagues|office|team lead) (?:at|with) "
          r"(?P<employer>.+)", "profile.implied"),
    _rule(r"\bmy (?:boss|manager|team|coworkers|co-workers|colleagues|office|team lead) (?:at|with) "
          r"(?P<employer>.+)", "profile.implied", named=("employer",)),
    _rule(_I + _ADV + r" (?:quit|left|resigned from|walked away from) (?P<ended>my (?:old |current )?(?:job|position|"
          r"role|company)|the " + _WORKPLACE + r"\b.*)", "profile.change", {"employer": "none"}),
    _rule(_I + _ADV + r" (?:quit|resigned from) (?P<ended>.+)", "profile.change", {"employer": "none"},
          named=("ended",)),
    _rule(_I + _ADV + r" (?:got|was|have been|'ve been) (?:laid off|let go|fired)", "profile.change",
          {"employer": "none"}),
    _rule(_I + _ADV + r" lost my job", "profile.change", {"employer": "none"}),
    _rule(r"(?:" + _IM + r"|" + _I + r")" + _ADV + r" retired\b", "profile.change", {"job": "retired"}),
    # school
    _rule(_I + _ADV + r" (?:study|am studying|'m studying)(?: [\w-]+){0,3}? at (?P<school>.+)", "profile.explicit"),
    _rule(_I + _ADV + r" (?:go to|attend|am attending|'m attending|am enrolled at|'m enrolled at) (?P<school>[^,.;!?]*?"
          r"\b(?:university|college|school|academy|institute|uni)\b[^,.;!?]*)", "profile.explicit"),
    # relationship
    _rule(r"\bmy (?:wife|husband|spouse|hubby)\b(?:,? (?P<partner>[A-Z][\w'-]+))?", "profile.implied",
          {"relationship": "married"}, named=("partner",)),
    _rule(r"(?:" + _I + r"|" + _IM + r")" + _ADV + r" (?:got |are |'re |am |'m )?married\b", "profile.change",
          {"relationship": "married"}),
    _rule(r"\bmy fianc(?:[ée]e?|e)\b(?:,? (?P<partner>[A-Z][\w'-]+))?", "profile.implied",
          {"relationship": "engaged"}, named=("partner",)),
    _rule(r"(?:" + _I + r"|" + _IM + r")" + _ADV + r" (?:got |are |'re |am |'m )?engaged\b", "profile.change",
          {"relationship": "engaged"}),
    _rule(r"\b(?:he|she|they) proposed\b|" + _I + r" proposed to (?P<partner>[A-Z][\w'-]+)", "profile.change",
          {"relationship": "engaged"}, named=("partner",)),
    _rule(r"\bmy (?:girlfriend|boyfriend|partner|gf|bf)\b(?:,? (?P<partner>[A-Z][\w'-]+))?", "profile.implied",
          {"relationship": "in a relationship"}, named=("partner",)),
    _rule(_I + _ADV + r" (?:started dating|am dating|'m dating|am seeing|'m seeing) (?P<partner>[A-Z][\w'-]+)",
          "profile.change", {"relationship": "in a relationship"}, named=("partner",)),
    _rule(_I + _ADV + r" (?:broke up|split up|called it off|called it quits)\b", "profile.change",
          {"relationship": "single"}),
    _rule(_IM + _ADV + r" single\b", "profile.explicit", {"relationship": "single"}),
    _rule(r"(?:" + _I + r"|" + _IM + r")" + _ADV + r" (?:separated|separating)\b", "profile.change",
          {"relationship": "separated"}),
    _rule(r"(?:" + _I + r"|" + _IM + r")" + _ADV + r" (?:got |are |'re |am |'m )?divorced\b|\b(?:the|my|our) divorce "
          r"(?:is|was|went|got|has been)(?: \w+)? (?:final|finalized|finalised|through|done)", "profile.change",
          {"relationship": "divorced"}),
    # diet
    _rule(_BEEN + _ADV + r" (?:an? )?(?:strict |full |100% )?(?P<diet>"
          + _DIET + r")" + _DIET_END, "profile.explicit"),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:went|gone|go|turned|become|became|switched to|am going|'m going|"
          r"decided to go|started eating|started) (?:fully |full |completely )?(?P<diet>" + _DIET + r")\b",
          "profile.change"),
    _rule(_BEEN + _ADV + r" (?:on|doing|following|trying) (?:a |the )?(?P<diet>" + _DIET + r")\b", "profile.explicit"),
    _rule(_IM + _ADV + r" (?:no longer|not) (?:an? )?(?P<ended>" + _DIET + r")(?: anymore| any more)?" + _DIET_END,
          "profile.change", {"diet": "no longer {ended}"}),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:stopped being|quit|gave up|given up|came off|went off|am off|'m off) "
          r"(?:being )?(?P<ended>" + _DIET + r")\b", "profile.change", {"diet": "no longer {ended}"}),
    _rule(_I + _ADV + r" (?:eat|am eating|'m eating|started eating|went back to eating|am back to eating|'m back to "
          r"eating) meat again\b", "profile.change", {"diet": "eats meat"}),
    # allergies, health, pets, family
    _rule(_IM + r"(?: \w+){0,2}? allergic to (?P<allergy>.+)", "profile.explicit"),
    _rule(r"\bmy (?:severe |mild |bad |serious |deadly )?(?P<allergy>[\w-]+(?: [\w-]+)?) allergy\b",
          "profile.explicit"),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:have|got) (?:an? )?(?:severe |mild |bad |serious |deadly )?"
          r"(?:(?P<allergy>[\w-]+(?: [\w-]+)?) allergy\b|allergy to (?P<allergy_to>.+))", "profile.explicit"),
    _rule(r"(?:" + _I + r"(?:'ve| have)?" + _ADV + r" (?:have|got|suffer from|live with|deal with|struggle with|am "
          r"dealing with|'m dealing with|was diagnosed with|been diagnosed with|got diagnosed with|am recovering "
          r"from|'m recovering from)|\bmy) (?:an? )?(?:mild |severe |chronic |bad |terrible |awful |occasional )?"
          r"(?P<health>" + _CONDITION + r")", "profile.explicit"),
    _rule(_I + r"(?:'ve| have| was| got)?(?: been| just| recently)* diagnosed with (?P<health>.+)", "profile.explicit"),
    _rule(_IM + _ADV + r" (?P<health>" + "|".join(_STATES_OF_HEALTH) + r")\b", "profile.explicit"),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:have|got|adopted|rescued|brought home|took in|own|are fostering|"
          r"am fostering|'m fostering) (?:our |my )?(?P<pet>(?:an? |two |three |another )?(?:[\w-]+ ){0,2}?"
          + _PETS + r"\b(?:,? (?:named|called) [\w'-]+)?)", "profile.household"),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:have|got) (?P<family>(?:an? |one |two |three |four |five |six |\d+ )"
          r"(?:little |young |grown |teenage |adult |older |younger |twin |baby )?" + _KIN + r")\b",
          "profile.household"),
    _rule(_IM + _ADV + r" (?:a )?(?P<family>(?:mom|mum|mother|dad|father|parent|grandma|grandpa|grandmother|"
          r"grandfather) of (?:\w+))", "profile.household"),
    _rule(_IM + _ADV + r" (?:expecting|having) (?:a |our |another )?(?:first |second |third )?(?:baby|child)\b",
          "profile.household", {"family": "a baby on the way"}),
    # tools, plans
    _rule(_I + _ADV + r" (?:use|am using|'m using|im using|have been using|'ve been using|"
          r"rely on|code in|write in) (?P<tool>.+)", "preference.tool"),
    _rule(_I + r"(?:'ve| have)?" + _ADV + r" (?:switched|migrated|moved everything)(?: over)?"
          r"(?: from (?P<replaces>.+?))? (?:to|into) (?P<tool>.+)", "preference.tool"),
    _rule(_IM + _ADV + r" (?:planning(?: to| on)?|hoping to|going to|intending to|aiming to|about to|preparing to|"
          r"thinking (?:of|about)|considering|looking forward to|moving to|relocating to) (?P<plan>.+)", "plan"),
    _rule(_I + _ADV + r" (?:plan|intend|hope|aim) to (?P<plan>.+)", "plan"),
)
#: Named groups a rule states its fact without: a partner's name written in lower case is left out.
_OPTIONAL = frozenset({"partner"})
#: Groups that are detail, not a statement: where the value of each goes.
_DETAIL = {"ended": "ended", "partner": "partner", "replaces": "replaces"}
_NOT_VALUES = _words("""
        a an it that this them there here these those something anything everything nothing lot bit to my
        our your his her their its for with in on at as""")
#: "I'm <Name>": a capitalised name closing its clause, after at most a greeting.
_CALLED = re.compile(r"^(?:(?:hi|hello|hey)(?: there| all| everyone)?[,!.]?\s+)?(?:I'm|I am|im|i'm)\s+"
                     r"(?P<name>[A-Z][a-z'-]+(?:\s[A-Z][a-z'-]+)?)\s*(?:[,.!;]|$)", re.IGNORECASE)
_NOT_NAME_WORDS = _words("""
        American Canadian British English Irish Scottish Welsh Australian German French Italian Spanish
        Mexican Chinese Japanese Korean Indian Brazilian Dutch Swedish Norwegian Danish Finnish Polish
        Russian Ukrainian Jewish Muslim Christian Catholic Hindu Buddhist Vietnamese Filipino Portuguese
        Greek Turkish Nigerian Kenyan Egyptian Pakistani Israeli Iranian Swiss Austrian Belgian Latino
        Latina Asian African European Sorry Fine Good Great Okay Ok Back Here Home Done Ready Sure Tired
        Busy Excited Happy Glad Alright Vegan Vegetarian Single Married Retired""")

#: The identity rule's nouns: a trade is a job, anything else an identity.
_NOT_IDENTITY = _words("bit little lot fan huge big kind sort part good great real total fast slow quick mix")
_JOB_SUFFIXES = ("er", "or", "ist", "ian", "ant", "ent", "nurse", "chef", "doctor", "coach", "artist", "engineer",
                 "cook", "dev", "architect", "barista", "pilot", "clerk", "medic", "admin", "analyst", "vet",
                 "surgeon", "mechanic", "attorney", "intern", "associate", "principal", "postdoc", "pm")
_NOT_JOBS = _words("""
        mother father sister brother daughter grandmother grandfather lover member player fan beginner
        newcomer user owner partner believer follower dreamer survivor parent student""")
_STUDENTS = _words("student freshman sophomore junior senior undergrad undergraduate postgrad")
_IDENTITY = re.compile(_IM + r"(?: (?:now|currently|still|actually|also))? (?:a |an )(?P<value>.+)", re.IGNORECASE)

_OTHER = re.compile(
    r"\b(?:my|our) (?P<relation>(?:best |close |old |new |little |big |older |younger )?" + _RELATION + r")"
    r"(?:,? (?P<name>[A-Z][\w'-]+))?,?(?: (?:who|just|now|still|also|recently|finally|currently|actually))*"
    r" (?P<verb>lives in|moved to|works as an?|works at|works for|is an?|loves|likes|enjoys|hates|is allergic to|"
    r"started at|started as an?|is from)\s+(?P<value>.+)", re.IGNORECASE)
_OTHER_ABOUT = {"lives in": "home", "moved to": "home", "works as": "job", "works at": "employer",
                "works for": "employer", "is": "identity", "loves": "like", "likes": "like", "enjoys": "like",
                "hates": "dislike", "is allergic to": "allergy", "started at": "employer", "started as": "job",
                "is from": "origin"}
_NOT_PERSON_NAMES = _words("just now still also recently finally currently actually who really")


#: A sentence about another person leads with them: "(Also,) my sister Ann got engaged", not
#: "my sister and I went" (about both) nor "I went with my sister" (about the speaker).
_LED_BY = re.compile(
    r"^\W*(?:(?:also|and|but|so|plus|oh|btw|anyway|other news|in other news|meanwhile|yes|yeah|haha|lol|ok|okay|"
    r"funny thing|fun fact)[,.!:]*\s+)*(?:my|our) (?P<relation>(?:best |close |old |new |little |big |older |"
    r"younger )?" + _RELATION + r")(?![\w'-])(?!(?:,? (?-i:[A-Z])[\w'-]+)?,? (?:and|&) (?:i|me|we)\b)"
    r"(?:,? (?P<name>(?-i:[A-Z])[\w'-]+))?",
    re.IGNORECASE)


def led_by_someone_else(sentence: str) -> str | None:
    """The person a sentence is about when it leads with another person the speaker names
    ("Also my colleague Jonas is training for ..." -> "colleague Jonas"): their relation, and
    their name when it is capitalised; None for a sentence about the speaker."""
    found = _LED_BY.match(sentence.replace("\u2019", "'"))
    if found is None:
        return None
    relation = " ".join(found["relation"].lower().split())
    name = found["name"]
    return f"{relation} {name}" if name and name[:1].isupper() and name.lower() not in _NOT_PERSON_NAMES else relation


def statements(clause: str) -> list[Statement]:
    """The durable facts ``clause`` (one first-person clause, straight apostrophes) states,
    in the order of the patterns: the speaker's own first, then what it says of a person the
    speaker names. Never raises for a string."""
    found: list[Statement] = []
    for rule in _RULES:
        match = rule.pattern.search(clause)
        if match is not None and not _negated(clause, match.start()):
            found.extend(_read(rule, match))
    found.extend(_identity(clause, found))
    called = _CALLED.match(clause.strip())
    if called and not any(s.about == "name" for s in found) and called["name"].split()[0] not in _NOT_NAME_WORDS \
            and called["name"][:1].isupper():
        found.append(Statement("name", called["name"], "profile.explicit"))
    found.extend(_others(clause))
    return _unique(found)


def _negated(clause: str, start: int) -> bool:
    """Whether "not" / "never" / "n't" comes right before the match (a fact denied)."""
    before = clause[max(0, start - 12):start].lower()
    return bool(re.search(r"(?:\bnot|\bnever|n't)\s*$", before))


def _read(rule: _Rule, match: re.Match[str]) -> Iterator[Statement]:
    groups = {name: value for name, value in match.groupdict().items() if value}
    for name in rule.named:
        if name in groups and not groups[name][:1].isupper():
            if name not in _OPTIONAL:
                return
            del groups[name]
    detail: dict[str, str] = {}
    for name, key in _DETAIL.items():
        if name in groups:
            cleaned = phrase(groups.pop(name), _NAME_END)
            if cleaned:
                detail[key] = cleaned
    if "allergy_to" in groups:
        groups["allergy"] = groups.pop("allergy_to")
    for about, template in rule.fixed.items():
        yield Statement(about, template.format(ended=detail.get("ended", "")), rule.rule, detail=detail)
    for about, raw in groups.items():
        value = _value(about, raw)
        if value:
            yield Statement(about, value, rule.rule, detail=detail)


def _value(about: str, raw: str) -> str:
    """The value of ``about`` at the start of ``raw``, or "" when it names nothing."""
    end = _NAME_END if about in ("employer", "home", "origin", "school", "name", "tool") else VALUE_END
    value = phrase(raw, end)
    if about in ("allergy", "health", "tool", "plan"):
        value = re.sub(r"^(?:the|a|an|my|our|some|all|any)\s+", "", value, flags=re.IGNORECASE)
    words = value.split()
    counted = about in ("pet", "family") and len(words) > 1 and words[0].lower() in ("a", "an")
    first = words[1 if counted else 0].lower() if words else ""
    if not value or first in _NOT_VALUES or (about in ("home", "origin") and first[:1].isdigit()):
        return ""
    if about == "home" and first == "the" and not words[-1][:1].isupper():
        return ""  # "moved to the suburbs" names no place
    if about == "home" and re.search(r"\ball (?:day|night|week|weekend|the time)\b", value, re.IGNORECASE):
        return ""  # "I live in VS Code all day" is where the time goes, not a home
    return value


def _identity(clause: str, found: list[Statement]) -> Iterator[Statement]:
    """"I'm a/an X (at Y)": a job when X is a trade, a school when X is a student, else an
    identity; nothing when another rule read X (a diet, an age)."""
    match = _IDENTITY.search(clause)
    if match is None or _negated(clause, match.start()) or any(s.about in ("diet", "job") for s in found):
        return
    value = phrase(match["value"], VALUE_END)
    words = value.split()
    if not words or words[0].lower().strip(",") in _NOT_IDENTITY or len(words) > 4:
        return
    last = words[-1].lower()
    tail = re.match(r"\s+(?:at|for|with) (?P<where>.+)", match["value"][len(value):], re.IGNORECASE)
    where = _value("employer", tail["where"]) if tail else ""
    if last in _STUDENTS:
        yield Statement("identity", value, "profile.identity")
        if where:
            yield Statement("school", where, "profile.explicit")
        return
    if last.endswith(_JOB_SUFFIXES) and last not in _NOT_JOBS:
        yield Statement("job", value, "profile.identity")
        if where:
            yield Statement("employer", where, "profile.explicit")
        return
    yield Statement("identity", value, "profile.identity")


def _others(clause: str) -> Iterator[Statement]:
    """What the clause says of a person the speaker names ("my sister Ann lives in Rome")."""
    for match in _OTHER.finditer(clause):
        relation = " ".join(match["relation"].lower().split())
        name = match["name"]
        if name is not None and (not name[:1].isupper() or name.lower() in _NOT_PERSON_NAMES):
            name = None
        verb = re.sub(r" an?$", "", match["verb"].lower())
        about = _OTHER_ABOUT[verb]
        value = _value(about, match["value"])
        if about == "identity" and value:
            if value.split()[0].lower() in _NOT_IDENTITY or len(value.split()) > 4:
                continue  # "my friend who is a fan of ...", "a bit of a mess"
            last = value.split()[-1].lower()
            about = "job" if last.endswith(_JOB_SUFFIXES) and last not in _NOT_JOBS else "identity"
        if value:
            yield Statement(about, value, "entity.fact", name or relation, {"relation": relation})


def _unique(found: list[Statement]) -> list[Statement]:
    """One statement per (about, subject, value), the first; one value per attribute and
    subject (the first rule's: the patterns are in order of how directly they say it)."""
    kept: list[Statement] = []
    for statement in found:
        if any(s.about == statement.about and s.subject == statement.subject
               and (s.single or s.value.lower() == statement.value.lower()) for s in kept):
            continue
        kept.append(statement)
    return kept
