"""Write math_realistic.jsonl: realistic responses in the public answer formats of AIME, HMMT,
MATH-500 and DAPO-Math-17k, with hand-checked labels (the reward benchmark's held-out corpus).

Each item is a reference answer as those sets write it (integers with AIME's leading zeros,
LaTeX fractions, radicals, pi, powers, binomials, intervals, tuples, sets, matrices, choice
letters, names, units, money, percent, degrees, complex numbers, expressions), spellings
of the same value a solver might produce, and wrong answers close to it.  Each spelling is
wrapped in a response: two sentences of work, then a box (``$\\boxed{}$``, ``\\[\\boxed{}\\]``,
a box after a discarded first attempt...) or a DAPO-style ``Answer:`` line.  Deterministic:
``python tests/reward/data/make_math_realistic.py`` rewrites the same file.
"""

import json
import random
from pathlib import Path

random.seed(20261201)
# (source, gold, [equivalent spellings], [wrong spellings])
ITEMS = [
    # AIME / DAPO: integers
    ("aime", "204", ["204", "0204", "204.", "204 ", "\\mathbf{204}"], ["240", "203", "2040"]),
    ("aime", "33", ["033", "33", "\\textbf{33}"], ["34", "330"]),
    ("aime", "5", ["005", "5"], ["6", "-5"]),
    ("aime", "907", ["907"], ["970", "9.07"]),
    ("aime", "62", ["62", "62\\text{ }"], ["26", "63"]),
    ("dapo", "17", ["17"], ["18", "71"]),
    ("dapo", "1004", ["1004", "1{,}004", "1,004"], ["1005", "1040"]),
    ("dapo", "-3", ["-3"], ["3"]),
    ("dapo", "120", ["120"], ["121", "720"]),
    ("dapo", "49", ["49", "7^2"], ["48"]),
    ("dapo", "2", ["2", "2.0", "\\frac{4}{2}"], ["1", "3"]),
    # MATH-500 / HMMT fractions and decimals
    (
        "math500",
        "\\frac{14}{3}",
        ["\\frac{14}{3}", "\\dfrac{14}{3}", "14/3", "\\tfrac{14}{3}"],
        ["\\frac{13}{3}", "\\frac{3}{14}", "4.66"],
    ),
    (
        "math500",
        "\\frac{3}{56}",
        ["\\dfrac{3}{56}", "\\frac{3}{56}", "\\frac{6}{112}"],
        ["\\frac{3}{65}", "\\frac{5}{56}"],
    ),
    ("math500", "\\frac{1}{2}", ["0.5", "\\frac12", "1/2", "\\frac{2}{4}"], ["\\frac13", "0.25", "2"]),
    ("math500", "0.25", ["\\frac{1}{4}", "0.25", ".25", "\\frac{1}{4}"], ["0.52", "\\frac{1}{5}"]),
    ("hmmt", "\\frac{1}{576}", ["\\frac{1}{576}", "\\dfrac{1}{576}"], ["\\frac{1}{567}", "576"]),
    ("hmmt", "-\\frac{7}{9}", ["-\\frac{7}{9}", "\\frac{-7}{9}", "-\\dfrac79"], ["\\frac{7}{9}", "-\\frac{9}{7}"]),
    ("math500", "1.25", ["1.25", "\\frac{5}{4}", "1.250"], ["1.52", "\\frac{4}{5}"]),
    # radicals
    (
        "hmmt",
        "2\\sqrt{3}",
        ["2\\sqrt{3}", "2 \\sqrt 3", "\\sqrt{12}", "2\\sqrt3"],
        ["3\\sqrt{2}", "\\sqrt{6}", "2\\sqrt{2}"],
    ),
    ("math500", "11\\sqrt2", ["11\\sqrt{2}", "\\sqrt{242}", "11 \\sqrt{2}"], ["11\\sqrt{3}", "12\\sqrt2"]),
    (
        "hmmt",
        "\\frac{\\sqrt{5}-1}{2}",
        ["\\frac{\\sqrt{5}-1}{2}", "\\frac{-1+\\sqrt{5}}{2}", "\\frac{\\sqrt5}{2}-\\frac12"],
        ["\\frac{\\sqrt{5}+1}{2}", "\\frac{\\sqrt{5}-1}{4}"],
    ),
    ("hmmt", "8\\sqrt{2}", ["8\\sqrt{2}", "\\sqrt{128}", "8\\sqrt2"], ["4\\sqrt{2}", "8\\sqrt{3}"]),
    (
        "math500",
        "\\frac{\\sqrt{3}}{2}",
        ["\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}2", "\\frac{1}{2}\\sqrt{3}"],
        ["\\frac{\\sqrt{2}}{2}", "\\frac{1}{2}"],
    ),
    ("hmmt", "3-\\sqrt{2}", ["3-\\sqrt{2}", "-\\sqrt{2}+3", "3 - \\sqrt 2"], ["3+\\sqrt{2}", "\\sqrt{2}-3"]),
    ("math500", "\\sqrt{5}", ["\\sqrt{5}", "\\sqrt5", "5^{1/2}"], ["5", "\\sqrt{6}"]),
    ("hmmt", "1+\\sqrt{2}", ["1+\\sqrt{2}", "\\sqrt{2}+1"], ["1-\\sqrt{2}", "2\\sqrt{2}"]),
    # pi and other constants
    (
        "math500",
        "\\frac{9}{4}\\pi",
        ["\\frac{9\\pi}{4}", "\\frac{9}{4}\\pi", "2.25\\pi"],
        ["\\frac{9\\pi}{2}", "\\frac{4}{9}\\pi"],
    ),
    ("hmmt", "\\pi", ["\\pi"], ["2\\pi", "3.14"]),
    ("math500", "2\\pi", ["2\\pi", "2 \\pi"], ["\\pi", "4\\pi"]),
    ("hmmt", "\\frac{4}{9}\\pi", ["\\frac{4\\pi}{9}"], ["\\frac{9\\pi}{4}"]),
    # powers, binomials
    ("hmmt", "2^{20}", ["2^{20}", "1048576", "4^{10}"], ["2^{21}", "20^2"]),
    ("hmmt", "\\binom{10}{3}", ["120", "\\binom{10}{3}"], ["\\binom{10}{4}", "720"]),
    ("math500", "3^{10}", ["59049", "3^{10}"], ["3^{9}"]),
    # intervals, tuples, sets
    ("math500", "[-2, 7]", ["[-2,7]", "[-2, 7]", "\\left[-2, 7\\right]"], ["(-2, 7)", "[-7, 2]", "[-2, 7)"]),
    ("math500", "(-\\infty, 2]", ["(-\\infty,2]", "(-\\infty, 2]"], ["(-\\infty, 2)", "[2, \\infty)"]),
    ("math500", "(1, 3)", ["(1,3)", "\\left( 1, 3 \\right)"], ["(3, 1)", "(1, 4)"]),
    (
        "math500",
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        ["\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\frac{\\pi}{2})", "(3,\\frac\\pi2)"],
        ["(3, \\pi)", "\\left( \\frac{\\pi}{2}, 3 \\right)"],
    ),
    ("hmmt", "(2, -1)", ["(2,-1)", "(2, -1)"], ["(-1, 2)", "(2, 1)"]),
    ("math500", "1, 2, 3", ["1,2,3", "1, 2, 3"], ["1, 2", "1, 2, 4"]),
    ("math500", "\\{1, 3\\}", ["\\{1,3\\}", "\\{3, 1\\}"], ["\\{1, 2\\}"]),
    ("math500", "[0, \\infty)", ["[0,\\infty)", "[0, \\infty)"], ["(0, \\infty)"]),
    # matrices and vectors
    (
        "math500",
        "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
        ["\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"],
        ["\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}"],
    ),
    (
        "math500",
        "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}",
        ["\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}", "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}"],
        ["\\begin{pmatrix} 0 & 1 \\\\ 1 & 0 \\end{pmatrix}"],
    ),
    (
        "math500",
        "\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac{2}{3} \\end{pmatrix}",
        [
            "\\begin{pmatrix} -1/3 \\\\ 2/3 \\end{pmatrix}",
            "\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac{2}{3} \\end{pmatrix}",
        ],
        ["\\begin{pmatrix} \\frac{1}{3} \\\\ \\frac{2}{3} \\end{pmatrix}"],
    ),
    # text answers, choices, names
    ("math500", "\\text{(C)}", ["\\text{(C)}", "C", "(C)", "\\textbf{(C)}"], ["\\text{(B)}", "D"]),
    ("math500", "\\text{Evelyn}", ["\\text{Evelyn}", "Evelyn"], ["\\text{Evan}"]),
    ("math500", "\\text{odd}", ["\\text{odd}", "odd"], ["\\text{even}"]),
    ("math500", "\\text{E}", ["E", "\\text{E}"], ["A"]),
    # units, money, percent, degrees
    ("math500", "4", ["4\\text{ inches}", "4 \\text{ in}", "4"], ["5\\text{ inches}"]),
    ("math500", "32,348", ["\\$32,348", "32348", "32{,}348"], ["\\$32,384", "32,349"]),
    ("math500", "18.90", ["\\$18.90", "18.9", "18.90"], ["\\$19.80", "18.09"]),
    ("math500", "10\\%", ["10\\%", "10"], ["20\\%", "1"]),
    ("math500", "27^\\circ", ["27^\\circ", "27", "27^{\\circ}"], ["72^\\circ", "63"]),
    ("math500", "150", ["150^\\circ", "150"], ["30^\\circ"]),
    # complex numbers, expressions
    ("math500", "6 - 5i", ["6-5i", "6 - 5i", "-5i+6"], ["6+5i", "5-6i"]),
    ("math500", "p - q", ["p - q", "p-q", "-q+p"], ["q - p", "p + q"]),
    ("math500", "x^2+7x+10", ["x^2+7x+10", "(x+2)(x+5)", "10+7x+x^2"], ["x^2+7x+12", "(x+2)(x-5)"]),
    ("math500", "-\\frac{1}{2}x + 3", ["-\\frac{1}{2}x+3", "3-\\frac{x}{2}", "-0.5x+3"], ["\\frac{1}{2}x+3", "-2x+3"]),
    ("math500", "y = 2x + 3", ["y=2x+3", "y = 2x + 3", "2x+3"], ["y=3x+2"]),
    ("math500", "\\infty", ["\\infty"], ["-\\infty", "0"]),
    ("math500", "e^2", ["e^{2}", "e^2"], ["2e", "e^3"]),
    ("math500", "\\log_2 3", ["\\log_{2}3", "\\log_2 3"], ["\\log_3 2"]),
]
BOX_TEMPLATES = [
    "Let $x$ be the quantity we want. {work}\nTherefore, the answer is $\\boxed{{{a}}}$.",
    "{work}\n\nSo the final answer is \\(\\boxed{{{a}}}\\).",
    "{work}\nThus\n\\[\n\\boxed{{{a}}}\n\\]",
    "**Solution.** {work}\n\n**Final Answer**\n\\[ \\boxed{{{a}}} \\]",
    "{work} Checking the edge cases confirms it, so we get $\\boxed{{{a}}}$. This matches the constraints.",
    "{work}\nAt first I got $\\boxed{{{decoy}}}$, but that double counts. Correcting it gives $\\boxed{{{a}}}$.",
]
LINE_TEMPLATES = [
    "{work}\n\nAnswer: {a}",
    "{work}\nAnswer: ${a}$",
    "{work}\n\n**Answer:** ${a}$",
    "{work}\nFinal answer: {a}",
]
WORK = [
    "We set up the equation from the conditions and solve it step by step. Substituting back, every condition holds.",
    "By symmetry we may assume the first case. Counting the remaining configurations and adding them up gives the "
    "total.",
    "Using the identity $(a+b)^2 = a^2 + 2ab + b^2$ and the given values, we simplify the expression.",
    "Let $n$ be the number of terms. The sum telescopes, leaving only the first and the last terms.",
    "We compute the discriminant, $\\Delta = b^2 - 4ac$, and check which roots lie in the allowed range.",
    "Draw the altitude from the vertex; the two right triangles are similar, so the ratios of their sides agree.",
]
rows = []
for source, gold, good, bad in ITEMS:
    for label, answers in ((1, good), (0, bad)):
        for a in answers:
            latex_line = (
                any(ch in a for ch in "\\^{}") or not a.replace(".", "").replace("-", "").replace(",", "").isdigit()
            )
            kind = random.random()
            work = random.choice(WORK) + " " + random.choice(WORK)
            if kind < 0.65 or source in ("hmmt", "math500") and latex_line and kind < 0.8:
                template = random.choice(BOX_TEMPLATES)
                decoy = random.choice(bad) if bad else "0"
                response = template.format(work=work, a=a, decoy=decoy)
            else:
                response = random.choice(LINE_TEMPLATES).format(work=work, a=a)
            rows.append({"response": response, "ground_truth": gold, "label": label, "source": source, "answer": a})
# responses with no final answer
for gold in ("204", "\\frac{1}{2}", "2\\sqrt{3}"):
    rows.append(
        {
            "response": random.choice(WORK) + " I could not finish the computation in time.",
            "ground_truth": gold,
            "label": 0,
            "source": "missing",
            "answer": None,
        }
    )
random.shuffle(rows)
with open(Path(__file__).with_name("math_realistic.jsonl"), "w") as out:
    for row in rows:
        out.write(json.dumps(row) + "\n")
print(f"{len(rows)} rows, {sum(r['label'] for r in rows)} correct")
