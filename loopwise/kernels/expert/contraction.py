"""A two-operand einsum read as a (batched) matrix product, or the reason it is not one.

``torch.einsum("bik,kj->bij", x, w)`` names each dimension by a letter. Its letters fall into four
roles: *batch* letters (in both operands and the output), *row* letters (in the first operand and
the output only), *column* letters (in the second operand and the output only) and the *summed*
letter (in both operands, not in the output). A matrix product sums over exactly one letter;
anything else (two summed letters, none, a letter summed within one operand, a diagonal) is not
one, and :class:`NotAProduct` says which it is, naming the equation."""

from __future__ import annotations

from dataclasses import dataclass


class NotAProduct(ValueError):
    """An einsum that is not a (batched) matrix product; the message names the equation and why."""


@dataclass(frozen=True)
class Contraction:
    """``out = einsum(equation, a, b)`` as a product: ``a``'s and ``b``'s letters (in their own
    order), the output's, and each letter's role."""

    equation: str
    a: str
    b: str
    out: str
    batch: str  # in both operands and the output, in the output's order
    rows: str  # in ``a`` and the output only, in the output's order
    cols: str  # in ``b`` and the output only, in the output's order
    summed: str  # the one letter both operands share and the output drops

    def axis(self, operand: str, letter: str) -> int:
        """The dimension of ``operand`` (``"a"``, ``"b"`` or ``"out"``) that ``letter`` names."""
        return getattr(self, operand).index(letter)


def contraction(equation: str, operands: int = 2) -> Contraction:
    """``equation`` of an einsum over ``operands`` tensors as a :class:`Contraction`.

    Raises:
        NotAProduct: not two operands, an ellipsis, a letter twice in one operand (a diagonal) or in
            the output, a letter summed within one operand, or other than one letter summed over
            both (none: an outer product; two or more: a reduction over several axes).
    """
    spec = equation.replace(" ", "")
    said = f"einsum {equation!r}"
    if "..." in spec:
        raise NotAProduct(f"{said} has an ellipsis (dimensions not named by letters)")
    inputs, arrow, out = spec.partition("->")
    terms = inputs.split(",")
    if operands != 2 or len(terms) != 2:
        raise NotAProduct(f"{said} over {max(operands, len(terms))} operand(s) is not a product of two")
    a, b = terms
    if not arrow:  # implicit output: the letters that appear once, in alphabetical order
        out = "".join(sorted(c for c in set(a + b) if (a + b).count(c) == 1))
    if not (a + b + out).isalpha():
        raise NotAProduct(f"{said} is not letters, a comma and an arrow")
    for name, term in (("an operand", a), ("an operand", b), ("the output", out)):
        twice = sorted({c for c in term if term.count(c) > 1})
        if twice:
            raise NotAProduct(f"{said} repeats {', '.join(twice)} in {name} (a diagonal or trace, not a product)")
    alone = sorted(c for c in set(a) ^ set(b) if c not in out)
    if alone:
        raise NotAProduct(f"{said} sums {', '.join(alone)} within one operand (a reduction, not a product)")
    summed = [c for c in a if c in b and c not in out]
    if len(summed) != 1:
        what = "sums nothing (an outer product)" if not summed else \
            f"sums over {len(summed)} letters ({', '.join(summed)}): a reduction over several axes"
        raise NotAProduct(f"{said} {what}, not a matrix product")
    return Contraction(equation, a, b, out, batch="".join(c for c in out if c in a and c in b),
                       rows="".join(c for c in out if c in a and c not in b),
                       cols="".join(c for c in out if c in b and c not in a), summed=summed[0])


def weight_product(c: Contraction, weight: str) -> tuple[str, bool]:
    """How an einsum whose operand ``weight`` (``"a"`` or ``"b"``) is a 2-D matrix reads as a GEMM
    over the other operand's rows: (the other operand's side, whether the weight is stored
    (K, N), i.e. summed letter first). The other operand's letters other than the summed one are
    the output's rows in their order, followed by the weight's column.

    Raises:
        NotAProduct: the weight shares a batch letter with the other operand, the output's letters
            are not the other operand's followed by the weight's one column.
    """
    act = "b" if weight == "a" else "a"
    w_letters, x_letters = getattr(c, weight), getattr(c, act)
    free = [ch for ch in w_letters if ch != c.summed]
    if len(w_letters) != 2 or len(free) != 1 or free[0] not in c.out or free[0] in x_letters:
        raise NotAProduct(f"einsum {c.equation!r}: the 2-D weight is not one summed dimension and one output column")
    rows = "".join(ch for ch in x_letters if ch != c.summed)
    if c.out != rows + free[0]:
        raise NotAProduct(f"einsum {c.equation!r}: the output is not the input's dimensions followed by the weight's column")
    return act, w_letters[0] == c.summed
