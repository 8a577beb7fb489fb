"""SymPy computer algebra as a `math` expert: exact arithmetic, equation solving and geometry formulas.

Expressions arrive as text written by skills (or by a policy), often copied from questions, so the parser accepts
the notations those use: LaTeX (`\\frac{20}{3}`, `\\sqrt{3}`, `\\pi`), Unicode (`√3`, `π`, `×`, `÷`, `−`, `²`),
degrees (`30°` means 30·π/180, and `sind`/`cosd`/`tand` take degrees) and implicit multiplication (`2x`, `5√3`).
Parsing goes through `sympy.parsing.sympy_parser.parse_expr` with a namespace holding only SymPy math names and the
geometry formulas below, and text that could reach Python internals (dunder names, attribute access, lambda) is
refused first: nothing outside that namespace can be called. Timeouts are applied by the registry handle.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

from ..backends.packages import missing_package
from ..errors import ExpertRejected

__all__ = ["SympyMathExpert", "GEOMETRY_FORMULAS", "MAX_EXPRESSION_CHARS"]

MAX_EXPRESSION_CHARS = 2000
SIGNIFICANT_DIGITS = 12

# name -> (parameters, formula): callable by name inside expressions, e.g. "cone_volume(3, 4)".
GEOMETRY_FORMULAS: dict[str, tuple[str, str]] = {
    "hypotenuse": ("a b", "sqrt(a**2 + b**2)"),
    "leg": ("c a", "sqrt(c**2 - a**2)"),
    "triangle_area": ("b h", "b*h/2"),
    "heron": ("a b c", "sqrt(((a+b+c)/2)*((a+b+c)/2-a)*((a+b+c)/2-b)*((a+b+c)/2-c))"),
    "sas_area": ("a b C", "a*b*sin(C*pi/180)/2"),
    "law_of_cosines": ("a b C", "sqrt(a**2 + b**2 - 2*a*b*cos(C*pi/180))"),
    "trapezoid_area": ("a b h", "(a+b)*h/2"),
    "circle_area": ("r", "pi*r**2"),
    "circumference": ("r", "2*pi*r"),
    "sector_area": ("r theta", "pi*r**2*theta/360"),
    "arc_length": ("r theta", "2*pi*r*theta/360"),
    "sphere_volume": ("r", "4*pi*r**3/3"),
    "sphere_area": ("r", "4*pi*r**2"),
    "cylinder_volume": ("r h", "pi*r**2*h"),
    "cylinder_area": ("r h", "2*pi*r**2 + 2*pi*r*h"),
    "cone_volume": ("r h", "pi*r**2*h/3"),
    "cone_area": ("r l", "pi*r**2 + pi*r*l"),
    "pyramid_volume": ("base_area h", "base_area*h/3"),
    "polygon_interior_sum": ("n", "(n-2)*180"),
}

_FORBIDDEN = re.compile(r"__|\blambda\b|[A-Za-z_]\s*\.\s*[A-Za-z_]|[;\[\]{}`'\"\\@#$!]|\bimport\b")
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
_LATEX_SUBS: list[tuple[str, str]] = [
    (r"\\d?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"((\1)/(\2))"),
    (r"\\sqrt\s*\[([^\]]*)\]\s*\{([^{}]*)\}", r"((\2)**(1/(\1)))"),
    (r"\\sqrt\s*\{([^{}]*)\}", r"sqrt(\1)"),
    (r"√\s*\{([^{}]*)\}", r"sqrt(\1)"),
    (r"√\s*\(([^()]*)\)", r"sqrt(\1)"),
    (r"√\s*([0-9.]+|[A-Za-z])", r"sqrt(\1)"),
    (r"\^\s*\{([^{}]*)\}", r"**(\1)"),
]
_PLAIN_SUBS: list[tuple[str, str]] = [
    (r"\\left|\\right|\\,|\\!|\\;|\\ |\$", ""),
    (r"\\(?:cdot|times)", "*"),
    (r"\\div", "/"),
    (r"\\pi|π", "pi"),
    (r"\\circ|°|\^\s*\\circ|º", "*pi/180"),
    (r"\\(sin|cos|tan|ln|log|exp)", r"\1"),
    (r"[×·∙]", "*"),
    (r"÷", "/"),
    (r"[−–—]", "-"),
    (r"\^", "**"),
]


def normalize_expression(text: str) -> str:
    """Rewrite LaTeX/Unicode notation into SymPy syntax (`\\frac{a}{b}` -> `((a)/(b))`, `5√3` -> `5sqrt(3)`)."""
    s = str(text).strip().translate(_SUPERSCRIPTS)
    for _ in range(4):  # nested \frac / \sqrt unwrap from the inside out
        before = s
        for pattern, repl in _LATEX_SUBS:
            s = re.sub(pattern, repl, s)
        if s == before:
            break
    for pattern, repl in _PLAIN_SUBS:
        s = re.sub(pattern, repl, s)
    return s.replace("{", "(").replace("}", ")")


def format_value(value: Any) -> str:
    """A result as short text: integers and exact rationals as they are, other numbers as decimals, else `sstr`."""
    import sympy

    value = sympy.nsimplify(value, rational=False) if isinstance(value, float) else value
    if getattr(value, "free_symbols", None):
        return sympy.sstr(sympy.simplify(value))
    if value.is_Integer:
        return str(int(value))
    if value.is_Rational and value.q <= 1000:
        return f"{value.p}/{value.q}"
    number = sympy.N(value, SIGNIFICANT_DIGITS)
    if number.is_real is False:
        return sympy.sstr(number)
    text = f"{float(number):.{SIGNIFICANT_DIGITS}g}"
    return text if "e" in text else (text.rstrip("0").rstrip(".") if "." in text else text)


class SympyMathExpert:
    """Evaluates and solves with SymPy. Stateless apart from the parsing namespace, built on first use."""

    def __init__(self, max_chars: int = MAX_EXPRESSION_CHARS):
        self.max_chars = max_chars

    @classmethod
    def unavailable_reason(cls, **_: object) -> str | None:
        return "Python package 'sympy' is not installed" if missing_package("sympy") else None

    @cached_property
    def _namespace(self) -> dict[str, Any]:
        import sympy

        names = (
            "sqrt cbrt root exp log ln sin cos tan cot sec csc asin acos atan atan2 sinh cosh tanh Abs floor ceiling "
            "factorial binomial gcd lcm Min Max pi E I oo Rational Integer Float Symbol Eq"
        ).split()
        space: dict[str, Any] = {name: getattr(sympy, name) for name in names}
        space.update(abs=sympy.Abs, min=sympy.Min, max=sympy.Max, e=sympy.E, ln=sympy.log)
        for fn in ("sin", "cos", "tan"):
            space[f"{fn}d"] = (lambda f: lambda x: f(x * sympy.pi / 180))(getattr(sympy, fn))
        for fn in ("asin", "acos", "atan"):
            space[f"{fn}d"] = (lambda f: lambda x: f(x) * 180 / sympy.pi)(getattr(sympy, fn))
        for name, (params, formula) in GEOMETRY_FORMULAS.items():
            symbols = sympy.symbols(params)
            symbols = symbols if isinstance(symbols, tuple) else (symbols,)
            body = sympy.sympify(formula, locals={str(s): s for s in symbols})
            space[name] = sympy.Lambda(symbols, body)
        return space

    def parse(self, expression: str) -> Any:
        """Text -> SymPy expression (an `a = b` equation becomes `Eq(a, b)`). Raises ExpertRejected on bad input."""
        from sympy.parsing.sympy_parser import (
            convert_xor,
            implicit_application,
            implicit_multiplication,
            parse_expr,
            standard_transformations,
        )

        text = str(expression)
        if not text.strip():
            raise ExpertRejected("empty expression: give an arithmetic expression or an equation such as 'x + 2 = 5'")
        if len(text) > self.max_chars:
            raise ExpertRejected(f"expression is {len(text)} characters; the limit is {self.max_chars}")
        text = normalize_expression(text)
        if _FORBIDDEN.search(text):
            raise ExpertRejected(f"expression {expression!r} contains syntax that is not plain mathematics")
        sides = re.split(r"(?<![<>!=])=(?!=)", text)
        if len(sides) > 2:
            raise ExpertRejected(f"expression {expression!r} has more than one '='")
        # no symbol splitting: 'AB' stays one unknown, as geometry names segments
        transformations = standard_transformations + (implicit_multiplication, implicit_application, convert_xor)
        try:
            parsed = [
                parse_expr(side, local_dict=dict(self._namespace), global_dict={"__builtins__": {}, **_sympy_core()},
                           transformations=transformations)
                for side in sides
            ]
        except Exception as exc:  # SymPy raises many types (SyntaxError, TokenError, TypeError...) for bad text
            raise ExpertRejected(f"cannot parse {expression!r}: {type(exc).__name__}: {exc}") from exc
        if len(parsed) == 2:
            import sympy

            return sympy.Eq(parsed[0], parsed[1], evaluate=False)
        return parsed[0]

    def evaluate(self, expression: str) -> str:
        """Simplify/evaluate an expression: '5*sqrt(3)' -> '8.66025403784', '20/3' -> '20/3', 'x+x' -> '2*x'."""
        import sympy

        value = self.parse(expression)
        if isinstance(value, sympy.Equality):
            raise ExpertRejected(f"{expression!r} is an equation; use solve() for equations")
        return format_value(sympy.simplify(value))

    def solve(self, equations: list[str], unknown: str | None = None) -> list[str]:
        """Solve equations ('a = b', or expressions meaning '= 0'). With `unknown`: its values (real ones when any
        exist), e.g. ['5']. Without: one 'name = value' string per unknown per solution."""
        import sympy

        if isinstance(equations, str):
            equations = [equations]
        if not equations:
            raise ExpertRejected("solve() needs at least one equation")
        parsed = [self.parse(eq) for eq in equations]
        eqs = [p if isinstance(p, sympy.Equality) else sympy.Eq(p, 0) for p in parsed]
        symbols = sorted(set().union(*(e.free_symbols for e in eqs)), key=str)
        if not symbols:
            raise ExpertRejected(f"no unknown in {equations!r}")
        if unknown is not None:
            target = next((s for s in symbols if str(s) == unknown.strip()), None)
            if target is None:
                raise ExpertRejected(f"unknown {unknown!r} does not occur in {equations!r} (symbols: {symbols})")
        try:
            solutions = sympy.solve(eqs, symbols, dict=True)
        except (NotImplementedError, ValueError, TypeError) as exc:
            raise ExpertRejected(f"SymPy cannot solve {equations!r}: {exc}") from exc
        if unknown is not None:
            values = [sol[target] for sol in solutions if target in sol]
            real = [v for v in values if v.is_real is not False]
            return _unique(format_value(v) for v in (real or values))
        return _unique(", ".join(f"{s} = {format_value(v)}" for s, v in sol.items()) for sol in solutions)


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))


def _sympy_core() -> dict[str, Any]:
    """The names the parser's generated code refers to (Integer, Float, Symbol...), nothing else."""
    import sympy

    return {name: getattr(sympy, name) for name in ("Integer", "Float", "Rational", "Symbol", "Function", "Mul",
                                                     "Add", "Pow")}
