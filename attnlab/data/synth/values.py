"""The words of synthetic biographies: the six relations, the sentence templates of each
attribute, and the one list of values shipped here (majors). Every other value (names, cities,
universities, companies) is drawn from Faker (bios.py).

Provenance. The relations, the attribute order and the shape of the templates follow bioS in
Allen-Zhu and Li, "Physics of Language Models: Part 3.1, Knowledge Storage and Extraction"
(arXiv 2309.14316), section 2.1: six attributes, a sentence each, each sentence written with one
of several templates, the person named in full in the first sentence and by pronoun after it.
The templates below are written for attnlab (the paper's own 50-odd templates per attribute are
not published with it); the first ones paraphrase the paper's printed example biography. The
majors are a hand-written list of 100 common undergraduate fields of study (the paper draws
from "100 college majors" without listing them).
"""

from __future__ import annotations

# (attribute, relation name, question template): the order of a plain biography's sentences.
RELATIONS: tuple[tuple[str, str, str], ...] = (
    ("birth_date", "birth-date", "When was {subject} born?"),
    ("birth_city", "birth-city", "Where was {subject} born?"),
    ("university", "university", "Which university did {subject} attend?"),
    ("major", "major", "What did {subject} study?"),
    ("employer", "employer", "Which company did {subject} work for?"),
    ("work_city", "work-city", "Where did {subject} work?"),
)
ATTRIBUTES = tuple(a for a, _, _ in RELATIONS)

# {S}: the subject of the sentence (the full name, or He/She); {P}: the possessive at the start of
# a sentence (the full name's, or His/Her); {p}: a possessive inside a sentence (his/her);
# {v}: the value.
TEMPLATES: dict[str, tuple[str, ...]] = {
    "birth_date": (
        "{S} was born on {v}.",
        "{S} came into this world on {v}.",
        "{S} celebrated {p} birthday on {v}.",
        "{P} life began on {v}.",
        "{S} entered life on {v}.",
    ),
    "birth_city": (
        "{S} spent {p} early years in {v}.",
        "{S} was born in {v}.",
        "{P} birthplace is {v}.",
        "{S} hails from {v}.",
        "{S} was brought into the world in {v}.",
    ),
    "university": (
        "{S} received mentorship and guidance from faculty members at {v}.",
        "{S} graduated from {v}.",
        "{S} completed {p} education at {v}.",
        "{P} alma mater is {v}.",
        "{S} studied at {v}.",
    ),
    "major": (
        "{S} completed {p} education with a focus on {v}.",
        "{S} majored in {v}.",
        "{S} earned a degree in {v}.",
        "{P} field of study was {v}.",
        "{S} specialized in {v}.",
    ),
    "employer": (
        "{S} had a professional role at {v}.",
        "{S} was employed by {v}.",
        "{S} worked for {v}.",
        "{P} employer was {v}.",
        "{S} built a career at {v}.",
    ),
    "work_city": (
        "{S} was employed in {v}.",
        "{S} worked in {v}.",
        "{S} held a job in {v}.",
        "{P} office was in {v}.",
        "{S} commuted to an office in {v}.",
    ),
}

PRONOUNS = {"female": ("She", "Her", "her"), "male": ("He", "His", "his")}

MAJORS: tuple[str, ...] = (
    "Accounting", "Actuarial Science", "Advertising", "Aerospace Engineering", "African Studies",
    "Agricultural Science", "American Studies", "Animal Science", "Anthropology", "Applied Mathematics",
    "Archaeology", "Architecture", "Art History", "Astronomy", "Astrophysics",
    "Biochemistry", "Bioengineering", "Biology", "Biomedical Engineering", "Biophysics",
    "Business Administration", "Chemical Engineering", "Chemistry", "Civil Engineering", "Classics",
    "Cognitive Science", "Communications", "Comparative Literature", "Computer Engineering",
    "Computer Science", "Construction Management", "Creative Writing", "Criminal Justice", "Dance",
    "Data Science", "Dentistry", "Drama", "Early Childhood Education", "Earth Science", "Ecology",
    "Economics", "Education", "Electrical Engineering", "English Literature", "Environmental Science",
    "Epidemiology", "Film Studies", "Finance", "Fine Arts", "Food Science",
    "Forestry", "French", "Genetics", "Geography", "Geology",
    "German", "Graphic Design", "Health Administration", "History", "Hospitality Management",
    "Human Resources", "Industrial Design", "Industrial Engineering", "Information Systems",
    "International Relations", "Journalism", "Kinesiology", "Labor Studies", "Latin American Studies",
    "Linguistics", "Management", "Marine Biology", "Marketing", "Materials Science", "Mathematics",
    "Mechanical Engineering", "Microbiology", "Music", "Music Theory", "Neuroscience",
    "Nuclear Engineering", "Nursing", "Nutrition", "Oceanography", "Pharmacy",
    "Philosophy", "Photography", "Physics", "Political Science", "Psychology",
    "Public Health", "Public Policy", "Religious Studies", "Social Work", "Sociology",
    "Software Engineering", "Spanish", "Statistics", "Urban Planning", "Zoology",
)
assert len(MAJORS) == len(set(MAJORS)) == 100
