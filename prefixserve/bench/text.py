"""TextGenerator: seeded filler text, names and numbers for synthetic benchmark prompts.

Everything comes from the word lists below and one `random.Random`, so the same seed gives
the same text on every machine and no dataset is downloaded. It knows nothing about
tokenizers: lengths are counted in words (a common English word is one or two tokens).
"""

from __future__ import annotations

import random

WORDS = """
able about above across act add after again against age agree air all allow almost alone
along already also always among amount animal answer any appear apple area arm around arrive
art ask baby back bad bag ball bank bar base basket bear beat beauty bed before begin behind
believe bell below best better between big bird bit black blood blue board boat body bone
book born both bottom box boy branch bread break bridge bright bring brother brown build
burn busy buy call camp can capital captain car card care carry case cat catch cause cell
center century chair chance change charge chart check chief child choose church circle city
claim class clean clear climb clock close cloth cloud coast coat cold color column come
common company compare complete condition connect consider contain continue control cook
cool copy corn corner correct cost cotton count country course cover cow crease create crop
cross crowd cry current cut dance danger dark day dead deal dear death decide deep degree
depend describe desert design detail develop dictionary differ direct discuss distant divide
doctor dog dollar door double down draw dream dress drink drive drop dry duck during each
ear early earth east eat edge effect egg eight either electric element end enemy energy
engine enough enter equal even evening event ever every exact example except excite exercise
expect experience experiment eye face fact fair fall family famous far farm fast father
favor fear feed feel field fight figure fill final find fine finger finish fire first fish
fit five flat floor flow flower fly follow food foot force forest form forward found four
free fresh friend front fruit full game garden gas gather gentle get girl give glad glass
gold good govern grand grass gray great green ground group grow guess guide gun hair half
hand happen happy hard hat head hear heart heat heavy help high hill history hold hole home
hope horse hot hour house huge human hunt hurry idea imagine inch include industry insect
instant instrument interest invent iron island job join joy jump keep key kind king kitchen
knew know lady lake land language large last late laugh law lay lead learn leave left leg
length letter level lie life lift light like line liquid list listen little live locate
log long look lost loud love low machine magnet main major make man many map mark market
mass master match material matter meal mean measure meat meet melody metal method middle
might mile milk million mind mine minute miss modern moment money month moon morning mother
motion mountain mouth move music name nation natural nature near neck need neighbor never
new next night nine noise noon north nose note notice noun number object observe ocean
offer office often oil old open operate opposite orange order organ original other oxygen
page paint pair paper paragraph parent part party pass past path pattern pay people perhaps
period person picture piece pitch place plain plan plane planet plant play please plural
poem point poor popular port position possible pound power practice prepare present press
pretty print probable problem process produce product proper protect proud provide pull
push quart question quick quiet quite quotient race radio rail rain raise range rather reach
read ready real reason receive record region remember repeat reply represent require rest
result rich ride right ring rise river road rock roll room root rope rose round row rule
safe sail salt same sand save say scale school science score sea search season seat second
section see seed select self sell send sense sentence separate serve settle seven shape
share sharp sheet shell shine ship shoe shop shore short shoulder shout show side sight sign
silent silver simple sing single sister sit six size skill skin sky sleep slip slow small
smell smile snow soft soil soldier solution solve song soon sound south space speak special
speed spell spend spoke spot spread spring square stand star start state station stay steam
steel step stick still stone stood stop store story straight strange stream street strong
student study subject success sudden suffix sugar suit summer sun supply support sure
surface surprise swim syllable symbol system table tail take talk teach team tell ten term
test thank thick thin thing think third thousand three through throw tie time tiny tire
together tone tool top total touch toward town track trade train travel tree triangle trip
trouble truck true try tube turn twenty type under unit until use usual valley value vary
verb very view village visit voice vowel wait walk wall want warm wash watch water wave wear
weather week weight west wheel while white whole wide wife wild will win wind window wing
winter wire wish woman wonder wood word work world write yard year yellow young zero
""".split()

FIRST_NAMES = """
James Mary John Patricia Robert Jennifer Michael Linda David Elizabeth William Barbara Richard
Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Lisa Matthew Nancy Anthony Betty Mark
Sandra Steven Ashley Paul Kimberly Andrew Emily Joshua Donna Kevin Michelle Brian Carol George
Amanda Edward Melissa Ronald Deborah Timothy Stephanie Jason Rebecca Jeffrey Laura Ryan Sharon
Jacob Cynthia Gary Kathleen Nicholas Amy Eric Angela Jonathan Shirley Larry Emma Justin Anna
""".split()

LAST_NAMES = """
Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez
Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris
Sanchez Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill
Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts Doe Evans Turner
""".split()

JOBS = """
accountant architect baker biologist carpenter chemist chef dentist designer economist
editor electrician engineer farmer firefighter geologist historian journalist lawyer
librarian mechanic musician nurse painter pharmacist photographer physicist pilot plumber
professor programmer psychologist surgeon tailor teacher translator veterinarian writer
""".split()

COUNTRIES = [
    "Argentina", "Australia", "Austria", "Belgium", "Brazil", "Canada", "Chile", "China",
    "Denmark", "Egypt", "Finland", "France", "Germany", "Greece", "India", "Indonesia",
    "Ireland", "Italy", "Japan", "Kenya", "Mexico", "Morocco", "Netherlands", "New Zealand",
    "Nigeria", "Norway", "Peru", "Poland", "Portugal", "South Korea", "Spain", "Sweden",
    "Switzerland", "Thailand", "Turkey", "United Kingdom", "United States", "Vietnam",
]  # fmt: skip


class TextGenerator:
    """Seeded source of words, sentences and people; one instance per workload."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def sentence(self, n: int) -> str:
        """`n` words, capitalized, ending with a period."""
        text = self.words(max(n, 1))
        return text[0].upper() + text[1:] + "."

    def paragraph(self, n: int, sentence_len: int = 12) -> str:
        sentences = []
        while n > 0:
            k = min(n, sentence_len)
            sentences.append(self.sentence(k))
            n -= k
        return " ".join(sentences)

    def distinct_words(self, n: int) -> list[str]:
        """`n` different words; beyond the word list, synthesized ones like `bookriver`."""
        if n <= len(WORDS):
            return self.rng.sample(WORDS, n)
        out = list(WORDS)
        seen = set(out)
        while len(out) < n:
            word = self.rng.choice(WORDS) + self.rng.choice(WORDS)
            if word not in seen:
                seen.add(word)
                out.append(word)
        self.rng.shuffle(out)
        return out

    def full_names(self, n: int) -> list[str]:
        """`n` different "First Last" names."""
        pairs = [(f, last) for f in FIRST_NAMES for last in LAST_NAMES]
        if n > len(pairs):
            raise ValueError(f"at most {len(pairs)} distinct names, asked for {n}")
        return [f"{f} {last}" for f, last in self.rng.sample(pairs, n)]

    def choice(self, seq: list[str]) -> str:
        return self.rng.choice(seq)

    def randint(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)
