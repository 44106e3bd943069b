"""The named entities of bench_scale's realistic workload: a long tail of synthetic but
plausible people, companies, places and products.

Keyword alerts mostly watch rare terms (a person, a company, a town, a product), so
the realistic workload's items mention a few of these names each and most of its
subscriptions look for one.  The vocabulary is fixed (its own seed): the same names
for every item seed, each with the lower-cased term a subscription looks for.
Names are made of the parts below: their capitals are the only ones the names can
write (`CAPITALS`, for the XPath 1.0 translate() of lower-case())."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


GIVEN = _words(
    "Ingrid Søren Åsa Jón Guðrún Þóra José María Zoë Chloé Renée François Björn Małgorzata "
    "Łukasz Zofia Jiří Tomáš Ana João Luís Ömer Çağla Ayşe Mehmet Yuki Haruto Chen Wei "
    "Priya Arjun Amara Kwame Fatima Omar Leila Sven Nils Aino Eero Miloš Dragan Elif Oskar "
    "Émile Hélène Inés Agnès Anna Peter Maria David Sarah James Laura Thomas Emma Daniel "
    "Sofia Lucas Olivia Jonas Mia Felix Clara Paul Nora Leon Ida Hugo Alba Marco Giulia "
    "Pablo Lucía Diego Carmen Erik Freya Magnus Sigrid Henrik Karin Rui Inês Tiago Beatriz "
    "Kofi Ngozi Tunde Zainab Ravi Ananya Kenji Aiko Min-jun Seo-yeon Dmitri Olga Pavel "
    "Irina Katarzyna Piotr Ewa Andrzej Ágnes Zoltán Ilona Dóra Matej Petra Luka Ivana "
    "Samir Yasmin Karim Noor Tariq Aylin Emre Selin Kaan Lena Jakob Marta Viktor Elsa"
)
SURNAMES = _words(
    "Halvorsen Sigurðsson Jónsdóttir Martínez García Wójcik Kowalski Nowak Dvořák Novák "
    "Müller Schröder Öztürk Yılmaz Nakamura Tanaka Okafor Mensah Haddad Rossi Bianchi "
    "Lefèvre Dubois Ólafsson Þórsdóttir Ødegaard Ångström Virtanen Korhonen Lindqvist "
    "Bergström Johansson Nielsen Jensen Hansen Larsen Andersen Pedersen Fernández López "
    "González Rodríguez Pérez Sánchez Ramírez Torres Flores Rivera Gómez Díaz Moreau "
    "Laurent Girard Bonnet Fontaine Rousseau Chevalier Schmidt Schneider Fischer Weber "
    "Becker Hoffmann Schäfer Koch Richter Krüger Wagner Zimmermann Hartmann Conti Ricci "
    "Marino Greco Bruno Gallo Costa Fontana Esposito Romano Silva Santos Oliveira Pereira "
    "Ferreira Alves Carvalho Sousa Gonçalves Smith Johnson Williams Brown Jones Miller "
    "Taylor Anderson Thompson Walker Robinson Clarke Hughes Edwards Murphy Kelly Byrne "
    "Ryan Walsh Kovač Horvat Babić Marić Jurić Novaković Petrović Jovanović Nikolić Popescu "
    "Ionescu Dumitru Stan Popa Szabó Tóth Nagy Kiss Horváth Varga Kovács Farkas Papadopoulos "
    "Georgiou Nikolaidis Demir Şahin Çelik Aydın Kaya Arslan Doğan Kılıç Suzuki Takahashi "
    "Watanabe Ito Yamamoto Kobayashi Kim Lee Park Choi Jung Kang Cho Yoon Wang Li Zhang Liu "
    "Yang Huang Zhao Wu Zhou Xu Sun Singh Kumar Sharma Patel Gupta Reddy Iyer Nair Adeyemi "
    "Okonkwo Eze Boateng Owusu Asante Diallo Traoré Keita Ndiaye Haddou Mansour Khalil "
    "Nasser Saleh Karimi Hosseini Rahimi Novik Ivanova Smirnov Volkov Sokolova Lebedev"
)
# Synthetic cores: two or three syllables, onset + vowel (+ a coda), mostly single
# consonants and ASCII vowels, so that they read as names ("Velmora", "Kastrik", "Brønavik").
ONSETS = _words("b d f g h j k l m n p r s t v z b d k l m n r s t v br dr gr kr st tr sk sv")
VOWELS = _words("a e i o u a e o a e i o a y ei au")
RARE_ONSETS, RARE_VOWELS = _words("ł ś ž č š þ"), _words("ä ö ü ø å é á ó í")
RARE = 0.05  # the share of onsets and of vowels drawn from the rare ones
CODAS = _words("n r l s k m n r l nd rt st")
SURNAME_ENDINGS = _words("sen son sson dóttir ski ová ić ez ini ou berg gaard lund")
COMPANY_SUFFIXES = _words(
    "Systems Labs Energy Bank Group Motors Pharma Holdings Media Robotics AG ASA GmbH SA "
    "Airlines Foods Mining Capital Networks Biotech Telecom Logistics Insurance Shipping"
)
PLACE_ENDINGS = _words("vik berg stad ford ton ville polis grad øy fjörður holm wice ów ice ero")
PLACE_PREFIXES = ("", "", "", "", "Port ", "San ", "Nová ", "Upper ", "Bad ", "Saint-")
PRODUCT_MODELS = _words("X5 Pro 3 Air Max One S2 Neo Mini Ultra 7 Go")
# Share of the vocabulary per kind, in rank order after a shuffle.
KIND_COUNTS = (("person", 0.45), ("company", 0.25), ("place", 0.18), ("product", 0.12))
VOCABULARY_SEED = 20240601


@dataclass(frozen=True)
class Entity:
    kind: str  # person | company | place | product
    name: str  # as items write it
    term: str  # lower-cased, what a subscription looks for (a company: its core name)


def _core(rng: random.Random) -> str:
    parts = []
    for k in range(rng.choice((2, 2, 2, 3))):
        coda = rng.choice(CODAS) if rng.random() < (0.3 if k == 0 else 0.45) else ""
        onset = rng.choice(RARE_ONSETS if rng.random() < RARE else ONSETS)
        vowel = rng.choice(RARE_VOWELS if rng.random() < RARE else VOWELS)
        parts.append(onset + vowel + coda)
    core = "".join(parts)
    return core[:1].upper() + core[1:]


def _entity(rng: random.Random, kind: str, cores: set[str]) -> Entity:
    core = _core(rng)
    while len(core) < 5 or core in cores:
        core = _core(rng)
    cores.add(core)
    if kind == "person":
        surname = rng.choice(SURNAMES)
        if rng.random() < 0.6:  # the known surnames alone would give few distinct people
            surname = core + rng.choice(SURNAME_ENDINGS)
        name = f"{rng.choice(GIVEN)} {surname}"
        return Entity(kind, name, name.lower())
    if kind == "company":
        return Entity(kind, f"{core} {rng.choice(COMPANY_SUFFIXES)}", core.lower())
    if kind == "place":
        prefix = rng.choice(PLACE_PREFIXES)
        name = prefix + core + (rng.choice(PLACE_ENDINGS) if rng.random() < 0.6 else "")
        return Entity(kind, name, name.lower())
    name = f"{core} {rng.choice(PRODUCT_MODELS)}"
    return Entity(kind, name, name.lower())


@cache
def entities(count: int) -> tuple[Entity, ...]:
    """`count` entities with distinct names and terms, most mentioned first."""
    rng = random.Random(VOCABULARY_SEED)
    cores: set[str] = set()
    names: set[str] = set()
    found: list[Entity] = []
    for kind, share in KIND_COUNTS:
        wanted = len(found) + round(count * share) if kind != "product" else count
        while len(found) < wanted:
            entity = _entity(rng, kind, cores)
            if entity.name not in names:
                names.add(entity.name)
                found.append(entity)
    rng.shuffle(found)
    return tuple(found)


def _capitals() -> str:
    text = "".join((*GIVEN, *SURNAMES, *ONSETS, *RARE_ONSETS, *VOWELS, *RARE_VOWELS))
    text += "".join(PLACE_PREFIXES)
    text += "".join((*COMPANY_SUFFIXES, *PRODUCT_MODELS, *SURNAME_ENDINGS, *PLACE_ENDINGS))
    # a core's first letter is an onset's, upper-cased
    firsts = "".join(onset[:1].upper() for onset in (*ONSETS, *RARE_ONSETS, *RARE_VOWELS))
    found = {c for c in text + firsts if c != c.lower()}
    # translate() maps one character to one: str.lower() must too (no 'İ')
    assert all(len(c.lower()) == 1 for c in found), found
    return "".join(sorted(found))


CAPITALS = _capitals()
