"""The offline extractor: rules that find candidate memories in a session without a model.

:func:`extract_offline` reads ``messages[context.first_new:]`` (earlier messages are context
only: a tool call there still names the tool of a result here) one sentence at a time. Only a
speaker's own statements are facts about that speaker: the user's (role ``user``; abstracts say
"The user ...") or a named speaker's (LoCoMo's roles are names; abstracts name them). The
agent's side gives problem -> solution passages only, tool results give skills. Each rule has
a fixed confidence (:data:`CONFIDENCE`); what each rule finds and misses is in
docs/agent-memory.md (## Extraction).

A sentence is read clause by clause (``kwtree.memory.statements.clauses``: "I live in Boston
and I work as a nurse" is two statements), and the durable facts of each clause
(``kwtree.memory.statements.statements``: identity, home, work, school, relationship, diet,
allergies, health, pets, family, tools, plans, another person's facts) become candidates under
the attribute contract of ``kwtree.memory.candidates``. A message that is small talk
(``kwtree.retrieval.smalltalk.small_talk``) gives nothing.

Every candidate's ``content`` is the clause (or sentence, or sentences) it came from, verbatim
(a clause that left its subject out carries the one of the clause before it), and ``sources``
the indices of the messages holding them; ``happened_at`` is the time the
sentence states (``kwtree.memory.when.resolve_when`` against the message's ``ts``, else the
session's date), else the message's ``ts``, else the session's date.

:func:`default_extractor` picks the extractor the commit pipeline uses: this one without a
model, ``kwtree.memory.llm_extract.LLMExtractor`` with one.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from kwtree.agent.clients import LLMClient
from kwtree.memory.candidates import (
    ABOUT,
    ENTITIES_KEY,
    USER_SUBJECT,
    Candidate,
    ExtractContext,
    Extraction,
    Extractor,
    Message,
    PassedOver,
)
from kwtree.memory.corrections import Correction, correction
from kwtree.memory.llm_extract import LLMExtractor
from kwtree.memory.reading import ToolOutcome, anchor_of, check_session, dedupe, speaker_of, text_of, tool_outcomes
from kwtree.memory.statements import (
    SENTENCE_END,
    VALUE_END,
    Statement,
    clauses,
    led_by_someone_else,
    sentences,
    statements,
)
from kwtree.memory.statements import phrase as _phrase
from kwtree.memory.when import resolve_when
from kwtree.normalize import normalize_name
from kwtree.retrieval.smalltalk import small_talk

__all__ = ["CONFIDENCE", "MAX_CANDIDATES_PER_CALL", "MAX_CANDIDATES_PER_MESSAGE", "MAX_SCANNED_CHARS",
           "default_extractor", "extract_offline"]

#: The fixed confidence of each rule: how often, reading LoCoMo and hand-made sessions, the
#: rule's candidate was a true fact about the speaker (a judgement, not a measured rate).
CONFIDENCE = {
    "profile.explicit": 0.9,    # "my name is", "I work as", "I live in", "I'm 34"
    "profile.identity": 0.6,    # "I am a <noun>" (job or identity, guessed from the noun)
    "profile.change": 0.8,      # "I started as / joined / quit / moved to / went vegan / got engaged"
    "profile.implied": 0.6,     # "since moving to X", "my new boss at Y", "my wife", "the new place in X"
    "profile.household": 0.8,   # "we adopted a dog", "I have two kids"
    "preference.tool": 0.7,     # "I (always) use X", "I switched to X"
    "plan": 0.6,                # "I'm planning / going / thinking of ..."
    "entity.fact": 0.7,         # "my sister lives in Denver": a fact of the person named
    "preference.stated": 0.7,   # "I love / enjoy / hate ..."
    "preference.favorite": 0.8,  # "my favorite X is Y"
    "event.dated": 0.7,         # a sentence whose time expression resolves
    "event.past": 0.5,          # "I went / visited / bought ..." with no time stated
    "entity.related": 0.8,      # "my sister Ann", "my dog Max"
    "entity.named": 0.5,        # a capitalised name inside a sentence
    "pattern": 0.6,             # "I usually / always ...", "every morning I ..."
    "case": 0.6,                # "fixed it by", "the solution was", "what worked was"
    "skill": 0.9,               # a tool result (the outcome is structural, not guessed)
    "correction": 0.8,          # "scratch that, it's the 7th, not the 5th" (kwtree.memory.corrections)
}
#: At most this many candidates from one message, and from one call (the first found win).
MAX_CANDIDATES_PER_MESSAGE = 12
MAX_CANDIDATES_PER_CALL = 400
#: Only the first this-many characters of a message are read (the rules are linear, but a
#: pasted document is not conversation).
MAX_SCANNED_CHARS = 8_000
#: An aggregated entity candidate keeps at most this many of its sentences.
MAX_ENTITY_SENTENCES = 3
#: The longest value, topic or key a rule takes, in words.
MAX_PHRASE_WORDS = 6


def default_extractor(llm_client: LLMClient | None) -> Extractor:
    """The extractor to use: :func:`extract_offline` without a client, else an
    :class:`~kwtree.memory.llm_extract.LLMExtractor` over it (default chunking)."""
    return extract_offline if llm_client is None else LLMExtractor(llm_client)


def extract_offline(messages: Sequence[Message], context: ExtractContext) -> Extraction:
    """The candidate memories the rules find in ``messages[context.first_new:]``, deduplicated
    (``kwtree.memory.reading.dedupe``), at most MAX_CANDIDATES_PER_MESSAGE per message and
    MAX_CANDIDATES_PER_CALL in all, as an Extraction whose ``passed_over`` tells each
    candidate found but not returned and why: over a cap, folded into another, or found in a
    message that is small talk (tool results are never small talk). Never calls a model nor
    reads the clock.

    Raises InvalidInputError (naming the field) for malformed messages, a bad ``ts`` or a
    ``first_new`` out of range."""
    times = check_session(messages, context)
    found: list[Candidate] = []
    passed: list[PassedOver] = []
    skills: dict[int, list[Candidate]] = {}
    for outcome in tool_outcomes(messages, context.first_new):
        skills.setdefault(outcome.index, []).append(_skill(outcome, times, context))
    for index in range(context.first_new, len(messages)):
        message = messages[index]
        speaker = speaker_of(message)
        text = text_of(message)[:MAX_SCANNED_CHARS]
        anchor = anchor_of(times, index, context)
        said: list[Candidate] = []
        parts = sentences(text)
        for position, sentence in enumerate(parts):
            if speaker is not None:
                said.extend(_filed_by_name(list(_about_speaker(sentence, speaker, index, anchor))))
            said.extend(_cases(parts, position, index, anchor))
        if speaker is not None and (corrects := correction(messages, index)) is not None:
            said.insert(0, _correction(corrects, text, speaker, anchor))
        chatter = small_talk(text)
        if chatter is not None:
            passed.extend(_passed(said, f"small talk ({chatter})"))
            said = []
        from_message = [*skills.get(index, ()), *said]
        named = [candidate for candidate in from_message if normalize_name(candidate.key)]
        passed.extend(_passed([c for c in from_message if c not in named], "its key names nothing (punctuation only)"))
        from_message = named
        found.extend(from_message[:MAX_CANDIDATES_PER_MESSAGE])
        passed.extend(_passed(from_message[MAX_CANDIDATES_PER_MESSAGE:],
                              f"over MAX_CANDIDATES_PER_MESSAGE ({MAX_CANDIDATES_PER_MESSAGE}) for one message"))
    kept = dedupe(found, speakers=_speakers(messages), max_entity_sentences=MAX_ENTITY_SENTENCES, passed=passed)
    passed.extend(_passed(kept[MAX_CANDIDATES_PER_CALL:],
                          f"over MAX_CANDIDATES_PER_CALL ({MAX_CANDIDATES_PER_CALL}) for one call"))
    return Extraction(kept[:MAX_CANDIDATES_PER_CALL], passed)


def _correction(corrects: Correction, text: str, speaker: str, anchor: float | None) -> Candidate:
    """The memory of a correction: the correcting message, naming the turn and sentence it
    corrects (``facts["corrects_turn"]``, ``facts["corrects"]``) for the commit to supersede."""
    who = _subject(speaker)
    return Candidate("events", _phrase(corrects.sentence) or corrects.sentence[:60],
                     f'{who} corrected what was said before ("{corrects.sentence}").', text.strip(),
                     CONFIDENCE["correction"], (corrects.index,), anchor,
                     {"subject": USER_SUBJECT if speaker == "the user" else speaker, "kind": "correction",
                      "corrects": corrects.sentence, "corrects_turn": corrects.corrected})


def _passed(candidates: Sequence[Candidate], reason: str) -> list[PassedOver]:
    return [PassedOver(min(c.sources), c.content, reason, c.category, c.key) for c in candidates]


# --- sentences and third person -------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())




_ARTICLES = re.compile(r"^(?:the|a|an|my|some|all|all the|any|to|going|doing)\s+", re.IGNORECASE)

#: Verbs that do not take a third-person -s after "I": past tenses and modals.
_UNINFLECTED = _words("can could will would shall should may might must had was were did said thought felt knew "
                      "heard saw went made took got met bought ran found gave began won lost wrote ate drove flew "
                      "left came became told built sang spent taught caught brought sold swam rode fell kept slept "
                      "paid drew grew threw broke chose put read let set cut hit hurt quit")


def _inflect(found: re.Match[str], subject: str) -> str:
    """ "I usually run" -> "<subject> usually runs": the present-tense verb after the subject
    takes -s; past tenses and modals stay."""
    verb = found["verb"]
    if verb in _UNINFLECTED or verb.endswith("ed"):
        pass
    elif verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        verb += "es"
    elif verb.endswith("y") and verb[-2:-1] not in ("a", "e", "o", "u"):
        verb = verb[:-1] + "ies"
    else:
        verb += "s"
    return f"{subject}{found['adverb']} {verb}"


Rewrite = str | Callable[..., str]
_THIRD_PERSON: tuple[tuple[re.Pattern[str], Rewrite], ...] = (
    (re.compile(r"\bI am\b|\bI'm\b"), "{s} is"),
    (re.compile(r"\bI was\b"), "{s} was"),
    (re.compile(r"\bI have\b|\bI've\b"), "{s} has"),
    (re.compile(r"\bI'll\b"), "{s} will"),
    (re.compile(r"\bI'd\b"), "{s} would"),
    (re.compile(r"\bI don't\b"), "{s} doesn't"),
    (re.compile(r"\bI do\b"), "{s} does"),
    (re.compile(r"\bI\b(?P<adverb>(?: (?:usually|always|often|normally|typically|regularly|generally|really|also|"
                r"just|still|sometimes|never|rarely|mostly|even|ever|once|[a-z]+ly))*) (?P<verb>[a-z]+)\b"), _inflect),
    (re.compile(r"\bI\b"), "{s}"),
    (re.compile(r"\bmyself\b", re.IGNORECASE), "themselves"),
    (re.compile(r"\bmy\b", re.IGNORECASE), "{p}"),
    (re.compile(r"\bme\b"), "them"),
    (re.compile(r"\bmine\b"), "theirs"),
)


def _subject(speaker: str) -> str:
    return "The user" if speaker == "the user" else speaker


def _possessive(speaker: str) -> str:
    return "the user's" if speaker == "the user" else f"{speaker}'s"


def _third_person(sentence: str, speaker: str) -> str:
    """``sentence`` told about ``speaker``: "I went" -> "Caroline went", "my" -> "Caroline's";
    a transcript label naming the speaker ("Caroline: I went") is dropped."""
    told = sentence[len(speaker) + 1:].lstrip() if sentence.startswith(f"{speaker}:") else sentence
    for pattern, replacement in _THIRD_PERSON:
        if isinstance(replacement, str):
            told = pattern.sub(replacement.format(s=_subject(speaker), p=_possessive(speaker)), told)
        else:
            told = pattern.sub(functools.partial(replacement, subject=_subject(speaker)), told)
    told = re.sub(r"(?<![.!?]) The user\b", " the user", told)
    told = told[:1].upper() + told[1:]
    return told if told.endswith((".", "!", "?")) else f"{told}."


def _date(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).date().isoformat()


# --- facts about the speaker -----------------------------------------------------------------

_I = r"(?:^|(?<=[\s,;:(\"]))"  # the start of a first-person clause
_ADVERB = r"(?:(?:really|also|just|absolutely|totally|truly|still|actually|honestly|do|definitely)\s+)?"
_PRONOUNS = _words("it that this you them him her those these how what when where why who which "
                      "everything something anything nothing lot")

_PREFERENCE = re.compile(
    r"(?:" + _I + r"(?:I|we)(?:\s+|(?='))" + _ADVERB + r"(?P<verb>love|like|enjoy|adore|prefer|hate|dislike|"
    r"can't stand|cannot stand|don't (?:really )?(?:like|enjoy|love|care for)|do not (?:like|enjoy|care for)|"
    r"(?:am|'m) (?:really |so |totally )?(?:into|passionate about|keen on|interested in|obsessed with)|"
    r"(?:am|'m) not (?:really |that |very |so )?(?:into|keen on|interested in)|"
    r"(?:am|'m) (?:not )?(?:really |much of |)(?:a |)(?:big |huge )?fan of)"
    # a clause that leaves its subject out: "not a big fan of X", "love sci-fi"
    r"|^(?:(?:honestly|really|tbh|also|yeah|ok|okay|well|but|and|so|oh|plus),?\s+)*(?P<bare>love|adore|hate|"
    r"can't stand|not (?:really |much of |)(?:a |)(?:big |huge )?fan of|(?:a )?(?:big |huge )fan of|"
    r"not (?:really )?into|(?:really |so )into|obsessed with))\s+(?P<topic>.+)", re.IGNORECASE)
_FAVORITE = re.compile(r"\b[Mm]y (?:favorite|favourite|fave|all-time favorite) (?P<what>[\w\s-]{1,30}?) (?:is|are|was) "
                       r"(?P<value>.+)")
_DISLIKE = re.compile(r"hate|dislike|stand|\bnot\b|n't", re.IGNORECASE)

_HABIT = re.compile(
    _I + r"(?:(?P<when>every (?:day|morning|evening|night|week|weekend|month|year|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday)|on weekends|most days),?\s+)?(?:I|we)\s+(?P<how>usually|always|often|"
    r"normally|typically|regularly|generally|tend to|try to)?\s*(?P<rest>.+)", re.IGNORECASE)

_PAST_VERBS = _words(
    """went saw made took got met bought ran found gave began won lost wrote ate drove flew left came became told
    heard built sang spent taught caught brought sold swam rode fell kept slept paid drew grew threw broke chose
    joined visited started finished tried moved adopted graduated attended completed signed painted played
    watched baked cooked traveled travelled hiked volunteered celebrated decided learned learnt launched opened
    organized organised passed received returned participated created published released finally""")
_PAST = re.compile(
    _I + r"(?:I|[Ww]e)\s+(?:(?:just|finally|recently|also|actually|already)\s+)?(?P<verb>[a-z]+)\s+(?P<rest>.*)")

_RELATION = re.compile(
    r"\b[Mm]y (?P<relation>(?:best |close |old |new |little |big |older |younger )?(?:friend|sister|brother|mom|mother|"
    r"dad|father|son|daughter|wife|husband|partner|boyfriend|girlfriend|cousin|aunt|uncle|grandma|grandmother|"
    r"grandpa|grandfather|niece|nephew|boss|colleague|coworker|teacher|mentor|neighbor|neighbour|dog|cat|puppy|"
    r"kitten|pet|horse|bird|fish|kid|child|baby|roommate|fiancé|fiance|fiancée)),? (?:named |called )?"
    r"(?P<name>[A-Z][\w'-]+(?: [A-Z][\w'-]+)?)")
_NAME = re.compile(r"(?<![\w'-])(?P<name>[A-Z][\w'-]*[a-zA-Z](?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][\w'-]*[a-zA-Z])*)")
_NOT_NAMES = _words(
    """I I'm I've I'd I'll OK Ok Okay Hey Hi Hello Yes Yeah Yep No Nope Oh Wow Thanks Thank Sorry
    Congrats Congratulations Great Awesome Cool Nice Sure Well So And But Or Also Anyway Haha Lol Omg Aw Aww Ah
    Mr Mrs Ms Dr Mom Dad Mum Woah Whoa Yay Hmm Mon Tue Tues Wed Thu Thur Thurs Fri Sat Sun
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April
    May June July August September October November December Christmas Easter TV God""")


def _about_speaker(sentence: str, speaker: str, index: int, anchor: float | None) -> Iterator[Candidate]:
    """The candidates of one of the speaker's sentences, clause by clause
    (``kwtree.memory.statements.clauses``); a clause without a time of its own happened when
    its sentence says."""
    whole = resolve_when(sentence.replace("\u2019", "'"), anchor)
    for clause in clauses(sentence, _states):
        yield from _about_clause(clause, speaker, index, anchor, whole)


def _states(clause: str) -> bool:
    """Whether a clause (straight apostrophes) states a durable fact or a preference."""
    return bool(statements(clause)) or _PREFERENCE.search(clause) is not None or _FAVORITE.search(clause) is not None


def _about_clause(clause: str, speaker: str, index: int, anchor: float | None,
                  whole: float | None) -> Iterator[Candidate]:
    """The profile, preference, habit, event and entity candidates of one clause."""
    who, whose = _subject(speaker), _possessive(speaker)
    # The rules read a curly apostrophe as a straight one; the content stays verbatim.
    content, sentence = clause, clause.replace("\u2019", "'")
    when = resolve_when(sentence, anchor)
    at = when if when is not None else whole if whole is not None else anchor
    subject = USER_SUBJECT if speaker == "the user" else speaker
    # what a clause leading with another person tells ("Also my colleague Jonas ran Berlin") is
    # theirs: its event and the names it mentions carry them as subject, not the speaker
    around = led_by_someone_else(sentence) or subject

    def make(category: str, key: str, abstract: str, rule: str, facts: dict[str, Any]) -> Candidate:
        """A candidate of this clause; ``facts`` may name another ``subject``."""
        return Candidate(category, key, abstract, content, CONFIDENCE[rule], (index,), at,
                         {"subject": subject, **facts})

    stated = statements(sentence)
    told: set[str] = set()
    for statement in stated:
        if statement.subject is not None:
            told.add(statement.subject)
        yield _candidate(statement, make, speaker, sentence, when)

    favorite = _FAVORITE.search(sentence)
    if favorite:
        value, what = _phrase(favorite["value"]), favorite["what"].strip()
        if value:
            yield make("preferences", what, f"{whose[:1].upper()}{whose[1:]} favorite {what} is {value}.",
                       "preference.favorite", {"polarity": "like", "value": value})
    liked = _PREFERENCE.search(sentence)
    if liked:
        topic = _ARTICLES.sub("", _phrase(liked["topic"], VALUE_END))
        if normalize_name(topic) and topic.split()[0].lower() not in _PRONOUNS:  # not "about - I'm loving it"
            verb = " ".join((liked["verb"] or liked["bare"]).split())
            dislike = _DISLIKE.search(verb) is not None
            sense = "dislikes" if dislike else "likes"
            yield make("preferences", topic, f"{who} {sense} {topic}.", "preference.stated",
                       {"polarity": "dislike" if dislike else "like", "verb": verb})

    habit = _HABIT.search(sentence)
    planned = any(s.about == "plan" for s in stated)
    if habit and (habit["when"] or habit["how"]):
        rest = _phrase(habit["rest"])
        if rest and not any(s.about == "tool" for s in stated):  # "I always use uv" is the tool it names
            pace = habit["how"] or habit["when"]
            yield make("patterns", rest, _third_person(sentence, speaker), "pattern", {"frequency": pace.lower()})
    elif (when is not None or _is_past_action(sentence)) and not sentence.rstrip().endswith("?") and not planned:
        # (a question asks about a time: it tells no event; a plan is its own event)
        told_of = _third_person(sentence, speaker)
        if when is not None:
            told_of = f"{told_of[:-1]} ({_date(when)}){told_of[-1]}"
        past = _PAST.search(sentence)
        plain = _unaddressed(_LABEL.sub("", sentence))  # no "Ann:" label, no "Hey John," before it
        key = _phrase(_TIME_WORDS.split(f"{past['verb']} {past['rest']}" if past else plain, maxsplit=1)[0])
        if len(key.split()) < 2:  # a lone verb ("did") or a label ("Ann:") names no event, and recall would
            # lift it for every question holding that word: the sentence's first words name it
            key = _phrase(plain, SENTENCE_END) or sentence[:60]
        yield make("events", key, told_of, "event.dated" if when is not None else "event.past",
                   {"dated": when is not None, "subject": around})

    for related in _RELATION.finditer(sentence):
        name, relation = related["name"], related["relation"]
        if name not in _NOT_NAMES and name not in told:
            yield make("entities", name, f"{name} is {whose} {relation}.", "entity.related",  # about them
                       {"relation": relation, "kind": "animal" if relation.split()[-1] in _ANIMALS else "person",
                        "subject": f"{relation} {name}"})
    if sentence.rstrip().endswith("?"):
        return  # "Where in England was it?" asks about a name, and tells nothing of it
    for name in _names(sentence):
        if name not in told:
            yield make("entities", name, f"{who} mentioned {name}.", "entity.named",
                       {_MENTION: True, "subject": around})


#: The abstract of a statement by what it is about ({who}: the subject; {a}: "a" or "an").
_SAYS = {"name": "{whose} name is {v}.", "age": "{who} is {v} years old.", "home": "{who} lives in {v}.",
         "origin": "{who} is from {v}.", "job": "{who} works as {a} {v}.", "employer": "{who} works at {v}.",
         "school": "{who} studies at {v}.", "relationship": "{who} is {v}.", "diet": "{who} is {v}.",
         "car": "{who} drives {a} {v}.", "allergy": "{who} is allergic to {v}.", "health": "{who} has {v}.",
         "pet": "{who} has {v}.", "family": "{who} has {v}.", "identity": "{who} is {a} {v}.",
         "tool": "{who} uses {v}.", "like": "{who} likes {v}.", "dislike": "{who} dislikes {v}."}
#: Values that read otherwise: "The user is retired.", "The user eats meat.", "The user is diabetic."
_SAID_OTHERWISE = {("job", "retired"): "{who} is retired.", ("diet", "eats meat"): "{who} eats meat.",
                   ("employer", "none"): "{who} no longer works at {ended}."}
#: Where each aspect of a speaker's own multi-valued fact is filed.
_ASPECT_CATEGORY = {"allergy": "profile", "health": "profile", "pet": "profile", "family": "profile",
                    "identity": "profile", "tool": "preferences", "like": "preferences", "dislike": "preferences",
                    "plan": "events"}


def _candidate(statement: Statement, make: Callable[..., Candidate], speaker: str, clause: str,
               when: float | None) -> Candidate:
    """The candidate of one statement: the speaker's single-valued fact a profile fact with its
    attribute, a multi-valued one filed by its aspect, another person's an entity of theirs."""
    value, about, detail = statement.value, statement.about, dict(statement.detail)
    if statement.subject is None:
        who, whose = _subject(speaker), _possessive(speaker)
    else:
        relation = detail.get("relation", "")
        named = f" {statement.subject}" if statement.subject != relation else ""
        who = f"{_possessive(speaker)} {relation}{named}"
        whose = f"{who}'s"
    who, whose = who[:1].upper() + who[1:], whose[:1].upper() + whose[1:]
    if (about == "health" and " " not in value and value.lower().endswith(("ic", "ant", "ent", "nt"))) \
            or (about == "health" and value.lower() in ("pregnant", "sober", "deaf", "in recovery", "colorblind")):
        template = "{who} is {v}."
    elif about == "family" and not re.match(r"(?:an?|one|two|three|four|five|six|\d+) ", value, re.IGNORECASE) \
            and value != "a baby on the way":
        template = "{who} is {a} {v}."
    else:
        template = _SAID_OTHERWISE.get((about, value.lower()), _SAYS.get(about, "{who}: {v}."))
    if (about, value) == ("employer", "none") and "ended" not in detail:
        template = "{who} no longer has an employer."
    article = "an" if value[:1].lower() in "aeiou" else "a"
    # Led by what the fact is about (``ABOUT``: "Pet (animal, pet): ..."): a question often names
    # that ("a pet?", "what can she eat?"), not the value ("a dog", "vegetarian").
    lead = f"{about.capitalize()} ({ABOUT[about]})" if about in ABOUT else about.capitalize()
    abstract = f"{lead}: " + template.format(who=who, whose=whose, v=value, a=article, ended=detail.get("ended", ""))
    facts: dict[str, Any] = {**detail, "value": value}
    if about == "plan":
        key = _phrase(_TIME_WORDS.split(value, maxsplit=1)[0]) or value
        return make("events", key, _third_person(clause, speaker), statement.rule,
                    {**facts, "aspect": "plan", "dated": when is not None})
    if statement.subject is not None:
        kind = "animal" if detail.get("relation", "").split()[-1:] and detail["relation"].split()[-1] in _ANIMALS \
            else "person"
        facts = {**facts, "kind": kind, ("attribute" if statement.single else "aspect"): about}
        return make("entities", statement.subject, abstract, statement.rule, {**facts, "subject": statement.subject})
    if statement.single:
        key = about if speaker == "the user" else f"{speaker} {about}"
        return make("profile", key, abstract, statement.rule, {**facts, "attribute": about})
    category = _ASPECT_CATEGORY[about]
    key = value if category == "preferences" else about if speaker == "the user" else f"{speaker} {about}"
    if about == "tool":
        facts["polarity"] = "like"
    return make(category, key, abstract, statement.rule, {**facts, "aspect": about})


#: The categories whose candidate, when a sentence gives one, carries the names the sentence
#: mentions (``ENTITIES_KEY``): the commit files that memory under each name's keyword, instead
#: of a second memory saying "X mentioned Y" in the same words. (A profile fact is superseded
#: by a later one, and would leave its names filed under a fact it no longer states.)
_CARRIERS = ("events", "preferences", "patterns")
#: The fact marking a mere mention while one sentence is read (``_filed_by_name`` removes it).
_MENTION = "kwtree:mention"


def _filed_by_name(found: list[Candidate]) -> list[Candidate]:
    """``found`` (one sentence's candidates, its mere mentions last) with the mentions folded
    into the first candidate of a ``_CARRIERS`` category as that candidate's names, or kept as
    entity candidates when there is none."""
    kept: list[Candidate] = []
    mentions: list[Candidate] = []
    carrier = None
    for candidate in found:
        facts = dict(candidate.facts or {})
        if facts.pop(_MENTION, False):
            mentions.append(dataclasses.replace(candidate, facts=facts))
            continue
        if carrier is None and candidate.category in _CARRIERS:
            carrier = len(kept)
        kept.append(candidate)
    if carrier is None:
        return kept + mentions
    if mentions:
        facts = {**(kept[carrier].facts or {}), ENTITIES_KEY: [mention.key for mention in mentions]}
        kept[carrier] = dataclasses.replace(kept[carrier], facts=facts)
    return kept


#: An event's key stops at its time expression: "painted a lake last year" -> "painted a lake".
_TIME_WORDS = re.compile(r"\s(?:yesterday|today|tonight|last|this|next|ago|on|in (?:19|20)\d\d)\b", re.IGNORECASE)
_ANIMALS = _words("dog cat puppy kitten pet horse bird fish")
#: A speaker's label opening a transcript line: "Ann: ...".
_LABEL = re.compile(r"^[^\s:]{1,40}:\s+")


def _is_past_action(sentence: str) -> bool:
    found = _PAST.search(sentence)
    return found is not None and (found["verb"] in _PAST_VERBS
                                  or (found["verb"].endswith("ed") and len(found["verb"]) > 4))


#: Words that open an address to the listener: "Hey Ann!", "Thanks, Ann."
_OPENERS = _words("""hey hi hello thanks thank you bye goodbye dear congrats congratulations wow yo oh aw aww
    welcome cheers sorry yes yeah yep no nope ok okay sure morning night love miss see ya""")
#: What may follow a name spoken to the listener: the end of the sentence or of its clause.
_ADDRESS_END = re.compile(r"\s*(?:[,.!?;:)]|$)")


def _addressed(before: str, after: str) -> bool:
    """True if the name between ``before`` and ``after`` (one sentence) is spoken to the
    listener ("Thanks, Ann!", "Wow, Ann, that's great", "Totally agree, Ann."), not spoken
    of: it closes its clause, and it follows an opener ("Hey Ann") or a comma after a word
    that is no name ("Paris, France" names a place)."""
    if not _ADDRESS_END.match(after):
        return False
    words = before.rstrip(",").split()
    if all(word.strip(",!").lower() in _OPENERS for word in words):
        return True
    return before.endswith(",") and not words[-1][:1].isupper()


_ADDRESS = re.compile(r"^(?:(?:" + "|".join(sorted(_OPENERS, key=len, reverse=True)) + r")\b[\s,!.]*)+"
                      r"(?:[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?\s*[,!.]\s*)?|^[A-Z][\w'-]+\s*,\s+", re.IGNORECASE)


def _unaddressed(text: str) -> str:
    """``text`` without the greeting or address it opens with: "Hey John, this week's been
    busy" -> "this week's been busy" (an event named after its greeting named the listener,
    and every question naming the listener matched it)."""
    return _ADDRESS.sub("", text, count=1) or text


def _names(sentence: str) -> list[str]:
    """Capitalised names not at the sentence's start (nor right after a quote or a colon),
    nor spoken to the listener (``_addressed``): "Thanks, Ann!" says nothing about Ann."""
    names = []
    for found in _NAME.finditer(sentence):
        start = found.start()
        before = sentence[:start].rstrip()
        if not before or before.endswith((":", '"', "“", "-")):
            continue  # the sentence's first word: capitalised by grammar, not by name
        if _addressed(_LABEL.sub("", before), sentence[found.end():]):
            continue
        words = [w for w in found["name"].split() if w not in _NOT_NAMES]
        name = " ".join(words)
        while name.split() and name.split()[-1] in ("of", "de", "the"):
            name = " ".join(name.split()[:-1])
        if name and name not in _NOT_NAMES and len(name) > 1:
            names.append(name)
    return names


# --- problems solved, tools used -----------------------------------------------------------

_SOLUTION = re.compile(
    r"\b(?:fixed (?:it|this|that|the \w+) by|solved (?:it|this|that|the \w+) by|the (?:solution|fix|answer|trick) "
    r"(?:was|is)|what (?:worked|helped|fixed it) (?:was|is)|resolved (?:it|this|that) by|got it (?:working|to work) by|"
    r"worked around it by)\b", re.IGNORECASE)


def _cases(sentences: list[str], position: int, index: int, anchor: float | None) -> Iterator[Candidate]:
    """A problem -> solution passage: the solution sentence and the one before it (the problem)."""
    sentence = sentences[position]
    if not _SOLUTION.search(sentence):
        return
    problem = sentences[position - 1] if position > 0 else ""
    content = f"{problem} {sentence}".strip()
    key = _phrase(problem) if problem else _phrase(sentence)
    abstract = f"Solved: {problem} -> {sentence}" if problem else sentence
    yield Candidate("cases", key or sentence[:60], abstract[:300], content, CONFIDENCE["case"], (index,), anchor,
                    {"solution": sentence, "problem": problem})


def _skill(outcome: ToolOutcome, times: Sequence[float | None], context: ExtractContext) -> Candidate:
    verdict = "failure" if outcome.failed else "success"
    took = f" in {outcome.duration:g} s" if outcome.duration is not None else ""
    text = outcome.text.strip() or "(no output)"
    facts: dict[str, Any] = {"outcome": verdict, "duration": outcome.duration}
    abstract = f"A call to the tool {outcome.tool} {'failed' if outcome.failed else 'succeeded'}{took}."
    return Candidate("skills", outcome.tool, abstract, text[:1000], CONFIDENCE["skill"], (outcome.index,),
                     anchor_of(times, outcome.index, context), facts)


def _speakers(messages: Sequence[Message]) -> frozenset[str]:
    return frozenset(s for m in messages if (s := speaker_of(m)) is not None and s != "the user")

