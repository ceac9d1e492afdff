"""Bounding the numbers in boxed content from its text: what is beyond any GSM8K answer, and with how much work."""

from __future__ import annotations

import re

import pytest

from talktosolve.task import magnitude
from talktosolve.task.magnitude import beyond_any_answer


@pytest.mark.parametrize("boxed", [
    r"9^{9^{9^{9^{9}}}}", r"10^{10^{100}}", r"9^{9^9}", r"10^{101}", r"2^{2^{2^{2^{2^{2}}}}}",
    r"\left(9^{9}\right)^{9^{9}}", r"(9^{9})^{9^{9}}", r"{10^{10}}^{10^{10}}", r"(10)^{(10)^{(10)^{3}}}",
    r"1^{9^{9^{9}}}",  # 1 in the end, but math-verify would compute the tower first
    r"e^{e^{e^{100}}}", r"x^{200}", r"10^{-10^{100}}", r"10^{-200}", r"10^{9^{9}+1}", r"2^{3 \times 10^{3}}",
    r"10^{2 \cdot 9^{9}}", r"\sqrt{10^{10^{100}}}", r"100000!", r"(10^{10})!", r"1e99999999", r"1e400",
    r"1 \times 10^{99999999}", "9" * 101,
])
def test_beyond_any_answer(boxed):
    assert beyond_any_answer(boxed)


@pytest.mark.parametrize("boxed", [
    "72", "0", "0.5", "-5", "1,000", r"\$1,000.00", "72 dollars", r"\frac{1}{2}", r"\sqrt{4}", "x = 72", "x^2",
    r"2^{10}", r"3^{4}", r"2^{-3}", r"10^{100}", r"5 \times 10^3", r"1.2 \times 10^{6}", "1.5e3", "10!",
    r"9^{9}+9", r"10^{5}-10^{4}", r"0^{10^{100}}", r"a^{b^{c}}", "^", "!", "{}^{}", "9" * 100,
])
def test_within_reach_of_an_answer(boxed):
    assert not beyond_any_answer(boxed)


@pytest.mark.parametrize("boxed", [
    "^" * 1000, "9^{" * 333, "9^{" * 166 + "9" + "}" * 166, "(" * 999 + "^", "9!" * 500, "9^{9}+" * 166,
    "(9^{9})^" * 125, "{" * 499 + "9" + "}" * 499, "(" * 333 + "1" + ")" * 333, "9^{1+" * 200 + "1" + "}" * 200,
    "1+" * 500, r"\frac{1}{2}" * 90, "9^9^" * 250,
], ids=lambda v: repr(v[:12]))
def test_hostile_content_is_bounded_by_its_operators(boxed, monkeypatch):
    """Each rewrite removes an operator, so the passes over the text are at most the rules times the operators
    plus one: the work is at most quadratic in the content's length, whatever the content."""
    passes = []

    class Counted:
        def __init__(self, pattern):
            self.pattern = pattern

        def sub(self, repl, text):
            passes.append(text)
            return self.pattern.sub(repl, text)

    monkeypatch.setattr(magnitude, "_RULES", tuple((Counted(p), rule) for p, rule in magnitude._RULES))
    text = boxed[:1000]  # the grader looks only at content of at most 1,000 characters
    magnitude.log10_bounds(text)  # what `beyond_any_answer` runs, after one search for long numerals
    operators = len(re.findall(r"[-+*!^({]|\\times|\\cdot", text))
    assert len(magnitude._RULES) <= len(passes) <= len(magnitude._RULES) * (operators + 1)
