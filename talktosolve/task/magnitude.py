"""How large the numbers in a boxed answer can be, bounded from its text alone, without computing them.

The grader asks this before math-verify, which computes `9^{9^{9^{9^9}}}` or `10^{10^{100}}` exactly (with sympy)
and would spend seconds, or forever, on them. No GSM8K answer passes 10^100 or falls below 10^-100, so content
holding such a number is wrong without a look.

The bound is found by rewriting, innermost first, until nothing changes: each power, factorial, sum, product or
group whose operands are already known numbers becomes one *atom* standing for its log10 magnitude. Atoms are
numerals (`72`, `0.5`, `1e400`) and rewritten parts. An unknown base (a letter or command: `x`, `e`, `\\pi`) counts
as 10; anything else stays as written and bounds nothing. The figures are upper bounds on the magnitude, which
is all the decision needs: a sum is at most twice its larger term, `x - x` counts as large as `x + x`. Each
rewrite removes an operator, so the work is at most quadratic in the content's length (which the grader caps).
Pure Python.
"""

from __future__ import annotations

import math
import re

MAX_LOG10 = 100
"""A number of magnitude beyond 10^MAX_LOG10, or below 10^-MAX_LOG10 (but not 0), is no GSM8K answer."""

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters around a rewritten part's log10
_ATOM = rf"(?:{_OPEN}[^{_CLOSE}]*{_CLOSE}|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_NAME = r"(?:\\[A-Za-z]+|[A-Za-z])"

_LONG_DIGITS = re.compile(r"(?<![\d.])0*[1-9]\d{%d,}" % MAX_LOG10)
# A power's exponent is a braced group or a bare atom, either with a sign.
_POWER = re.compile(rf"(?P<b>{_ATOM}|{_NAME})\s*\^\s*(?:\{{\s*(?P<s>-?)\s*(?P<e>{_ATOM})\s*\}}"
                    rf"|(?P<s2>-?)(?P<e2>{_ATOM}))")
_FACTORIAL = re.compile(rf"(?P<n>{_ATOM})\s*!")
_GROUP = re.compile(rf"(?:\\left)?([({{])\s*-?\s*(?P<a>{_ATOM})\s*(?:\\right)?([)}}])")
_SUM = re.compile(rf"(?P<a>{_ATOM})\s*[-+]\s*(?P<b>{_ATOM})")
_PRODUCT = re.compile(rf"(?P<a>{_ATOM})\s*(?:\*|\\times|\\cdot)\s*(?P<b>{_ATOM})")


def _log10(atom: str) -> float:
    """log10 of an atom's magnitude (-inf for 0)."""
    if atom.startswith(_OPEN):
        return float(atom[1:-1])
    mantissa, _, exponent = atom.lower().partition("e")
    value = float(mantissa)
    if value == 0:
        return -math.inf
    return math.log10(value) + (int(exponent) if exponent else 0)


def _power(m: re.Match) -> float:
    base = m["b"]
    exponent, negative = (m["e"], m["s"]) if m["e"] is not None else (m["e2"], m["s2"])
    b = 1.0 if re.fullmatch(_NAME, base) else _log10(base)
    e = _log10(exponent)
    if b == 0 or b == -math.inf or e == -math.inf:  # a base of 1 or 0, or an exponent of 0
        return 0.0
    log10 = math.copysign(math.inf, b) if e > 300 else 10.0**e * b  # the exponent's value times log10(base)
    return -log10 if negative else log10


def _factorial(m: re.Match) -> float:
    n = _log10(m["n"])
    return math.inf if n > 300 else math.lgamma(10.0**n + 1) / math.log(10)


def _group(m: re.Match) -> float | None:
    """A group around one atom becomes a rewritten atom, never bare digits: `\\frac{1}{2}` must not read as 12."""
    return _log10(m["a"]) if (m[1], m[3]) in (("(", ")"), ("{", "}")) else None


_RULES = (  # by precedence: a rule applies only where none before it can
    (_POWER, _power),
    (_FACTORIAL, _factorial),
    (_PRODUCT, lambda m: _log10(m["a"]) + _log10(m["b"])),
    (_SUM, lambda m: max(_log10(m["a"]), _log10(m["b"])) + math.log10(2)),
    (_GROUP, _group),
)


def log10_bounds(text: str) -> list[float]:
    """log10 of the magnitude of every part of `text` that its text bounds: numerals and rewritten parts."""
    found: list[float] = []

    def rewrite(rule):
        def apply(m: re.Match) -> str:
            log10 = rule(m)
            if log10 is None:
                return m[0]
            found.append(log10)
            return f"{_OPEN}{log10:.6g}{_CLOSE}"
        return apply

    found += [_log10(atom) for atom in re.findall(_ATOM, text)]
    while True:
        for pattern, rule in _RULES:
            rewritten = pattern.sub(rewrite(rule), text)
            if rewritten != text:
                text = rewritten
                break
        else:
            return found


def beyond_any_answer(boxed: str) -> bool:
    """Whether boxed content holds a number beyond 10^MAX_LOG10, or below 10^-MAX_LOG10 but not 0."""
    if _LONG_DIGITS.search(boxed):
        return True
    return any(abs(b) > MAX_LOG10 and b != -math.inf for b in log10_bounds(boxed))
