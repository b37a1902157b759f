"""ModelNew's ``__init__`` for templates that read the model's own tensors: the reference's, copied.

The judge builds ``Model`` and ``ModelNew`` each right after ``torch.manual_seed(42)`` (KernelBench's
convention), so running the very statements of ``Model.__init__`` draws the very same random values:
the candidate holds the reference's parameters without touching the reference object, which the
static check rightly rejects. The copy must stand alone, so every module-level name it reads is
torch / nn / F / math, a builtin, a literal written down again in the generated file, or one of
the problem's own classes and functions (a network's block class), copied as written with what it
reads in turn; the members of Model that ``__init__`` uses (helper methods, class attributes) are
copied into ModelNew with it. Anything else makes the problem unsupported, with the name in the
reason.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from types import ModuleType

from loopwise.kernels.expert.elementwise import Unsupported

_SUPER = re.compile(r"super\(\s*Model\s*,\s*self\s*\)")
# Names the generated file binds itself; a copied constant must not rebind them.
RESERVED = frozenset({"torch", "nn", "F", "math", "triton", "tl", "ModelNew", "fused_elementwise_kernel",
                      "broadcast_index"})
# Expression nodes of a module-level assignment whose value cannot depend on where the problem is loaded.
_LITERAL_NODES = (ast.Constant, ast.Tuple, ast.List, ast.UnaryOp, ast.BinOp, ast.expr_context, ast.unaryop,
                  ast.operator)


@dataclass(frozen=True)
class InitSource:
    """The reference's ``__init__`` as ModelNew's, and the module-level literals it reads."""

    text: str  # the method (and the members of Model it uses), indented for a class body, ending in a newline
    constants: tuple[tuple[str, str], ...]  # (name, Python source of its value)
    helpers: str = ""  # the problem's own classes and functions it builds from, copied, for the module level


def reference_init(source: str, module: ModuleType) -> InitSource:
    """``Model.__init__`` of the problem ``source`` (already loaded as ``module``), made standalone:
    with the members of Model it uses (helper methods such as ``_make_layer``, class attributes such
    as ``expansion``), copied into ModelNew, and the problem's module-level classes and functions it
    builds from (a ``BasicBlock``, an ``MBConv``), copied verbatim to the generated file's module
    level, with whatever they read in turn.

    Raises:
        Unsupported: the method cannot be copied faithfully (it reaches Model itself, or module-level
            names that are neither allowed modules, literals nor the problem's own definitions).
    """
    tree = ast.parse(source)
    fn = _init_def(tree, module)
    model = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model"][-1]
    members = {}
    for stmt in model.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members[stmt.name] = stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                if isinstance(target, ast.Name):
                    members[target.id] = stmt
    texts, copied_nodes, queue, seen = [], [], [fn], {id(fn)}
    while queue:
        stmt = queue.pop(0)
        text = _SUPER.sub("super()", _reindent(source, stmt))
        try:
            copied = ast.parse("class ModelNew:\n" + text).body[0].body[0]
        except SyntaxError as exc:
            raise Unsupported(f"Model.__init__ does not survive re-indentation ({exc.msg})") from None
        used = _check_self_contained(copied, module)
        missing = sorted(used - members.keys())
        if missing:
            raise Unsupported(f"Model.__init__ uses Model.{missing[0]}, which ModelNew would not have")
        # Copied in the order Model's body lists them, so the generated source (and the cache key
        # derived from it) does not depend on the process's string hashing.
        for name in sorted(used, key=lambda n: members[n].lineno):
            if id(members[name]) not in seen:
                seen.add(id(members[name]))
                queue.append(members[name])
        texts.append(text)
        copied_nodes.append(copied)
    free = set().union(*(_free_names(node) for node in copied_nodes))
    helpers, names = _helpers(source, tree, free)
    constants = tuple((name, _constant(tree, module, name)) for name in sorted(names))
    return InitSource("\n".join(texts), tuple(c for c in constants if c[1] is not None), helpers)


def _helpers(source: str, tree: ast.Module, free: set[str]) -> tuple[str, set[str]]:
    """The problem's own module-level classes and functions among ``free`` (and those they read in
    turn), as their source in the file's order, and the other free names left (literals, modules)."""
    defs = {s.name: s for s in tree.body if isinstance(s, (ast.ClassDef, ast.FunctionDef))}
    for stmt in tree.body:  # imports of allowed modules, helpers made by the problem's own factories
        for name in _copied_bindings(stmt, defs):
            defs.setdefault(name, stmt)
    chosen, left, queue = {}, set(), sorted(free)
    while queue:
        name = queue.pop()
        if name in chosen or name in left:
            continue
        node = defs.get(name)
        if node is None or name in ("Model", "ModelNew") or name in RESERVED or not _defined_once(tree, name):
            left.add(name)
            continue
        if any(getattr(n, "id", None) == "Model" for n in ast.walk(node)):
            raise Unsupported(f"Model.__init__ builds {name}, which refers to Model itself")
        chosen[name] = node
        queue.extend(sorted(_free_names(node) - {name}))
    nodes = sorted({id(n): n for n in chosen.values()}.values(), key=lambda n: n.lineno)  # an import binds several
    text = "\n\n\n".join(_definition_source(source, node) for node in nodes)
    return (text + "\n" if text else ""), left


def _copied_bindings(stmt: ast.stmt, defs: dict) -> list[str]:
    """The names a module-level statement binds that the generated file may bind the same way, by
    copying the statement: an import of a module a candidate may import (the standard library,
    numpy, ...), or ``name = factory(literals)`` where ``factory`` is the problem's own function or
    class (``to_2tuple = _ntuple(2)``). Other computed values are not copied: a random draw at load
    time would differ from the reference's."""
    from loopwise.kernels.check import importable

    def copied(module: str) -> bool:  # torch and math under any name are bound as constants (:func:`_constant`)
        return importable(module) and module.split(".")[0] not in ("torch", "math")

    if isinstance(stmt, ast.Import):
        return [(a.asname or a.name.split(".")[0]) for a in stmt.names if copied(a.name)]
    if isinstance(stmt, ast.ImportFrom):
        if stmt.level or not stmt.module or not copied(stmt.module) or any(a.name == "*" for a in stmt.names):
            return []
        return [a.asname or a.name for a in stmt.names]
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id in defs and not stmt.value.keywords
            and all(isinstance(n, _LITERAL_NODES) for a in stmt.value.args for n in ast.walk(a))):
        return [stmt.targets[0].id]
    return []


def _defined_once(tree: ast.Module, name: str) -> bool:
    return sum(1 for stmt in tree.body if _binds(stmt, name)) == 1


def _definition_source(source: str, node: ast.stmt) -> str:
    """A module-level class or function as written, decorators included."""
    lines = source.splitlines()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(lines[first - 1:node.end_lineno])


def _init_def(tree: ast.Module, module: ModuleType) -> ast.FunctionDef:
    import torch

    cls = getattr(module, "Model", None)
    if not isinstance(cls, type) or cls.__bases__ != (torch.nn.Module,):
        raise Unsupported("Model does not derive from nn.Module alone, so its __init__ cannot be copied")
    classes = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model"]
    defs = [s for s in (classes[-1].body if classes else []) if isinstance(s, ast.FunctionDef) and s.name == "__init__"]
    if not defs:
        raise Unsupported("Model has no __init__ of its own in the problem file to copy")
    return defs[-1]


def _reindent(source: str, fn: ast.stmt) -> str:
    """The method's lines moved to a 4-space class body; lines indented less than the method (only
    possible inside a multi-line string) are kept as they are, so string contents do not change."""
    first = min([fn.lineno] + [d.lineno for d in getattr(fn, "decorator_list", [])])
    indent = fn.col_offset
    out = []
    for line in source.splitlines()[first - 1:fn.end_lineno]:
        if not line.strip():
            out.append("")
        elif line[:indent].strip() == "" and len(line) > indent:
            out.append("    " + line[indent:])
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _check_self_contained(fn: ast.stmt, module: ModuleType) -> set[str]:
    """Rejects what a copy in another class would get wrong (Model itself, statements that rebind
    module globals); returns the members of Model it reads through ``self``, which must be copied
    with it."""
    members = {k for k in vars(module.Model) if not (k.startswith("__") and k.endswith("__"))}
    used = set()
    for node in ast.walk(fn):
        if getattr(node, "id", None) == "Model" or getattr(node, "attr", None) == "Model":  # a Name or an Attribute
            raise Unsupported("Model.__init__ refers to Model itself (other than super(Model, self))")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            raise Unsupported("Model.__init__ rebinds module-level names")
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and node.attr in members):
            used.add(node.attr)
    return used


def _free_names(fn: ast.FunctionDef) -> set[str]:
    """Names the method reads that it does not bind itself (module globals and builtins)."""
    bound: set[str] = set()
    loaded: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def _constant(tree: ast.Module, module: ModuleType, name: str) -> str | None:
    """The source to bind ``name`` in the generated file, or None when its imports already do
    (torch, nn, F, math), it is a builtin or the problem leaves it unbound too."""
    import torch

    allowed = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math}
    if name not in vars(module):
        # a builtin, or a name the loaded problem does not bind either (Swin's ``checkpoint`` in a branch
        # its forward never takes): the copy leaves it unbound as the reference does, so it fails, or
        # not, exactly where the reference would
        return None
    value = vars(module)[name]
    if allowed.get(name, allowed) is value:
        return None
    if name not in RESERVED and isinstance(value, ModuleType):  # torch under another name (``import torch as th``)
        for alias, known in allowed.items():
            if value is known:
                return alias
        if value.__name__.startswith("torch.") and _attribute_path(torch, value.__name__) is value:
            return value.__name__  # a submodule torch reaches as an attribute (torch.fft)
    if name in RESERVED:
        raise Unsupported(f"Model.__init__ reads the global {name!r}, a name the generated file binds otherwise")
    if isinstance(value, torch.dtype) and getattr(torch, str(value).removeprefix("torch."), None) is value:
        return str(value)  # a dtype (DTYPE = torch.float16): written down as torch's own name for it
    if not _plain_literal(value):
        raise Unsupported(f"Model.__init__ reads the global {name!r} ({type(value).__name__}), which a "
                          "standalone file cannot copy: only int, float, bool, str, None, torch dtypes and "
                          "tuples or lists of them can be")
    if not _written_as_literal(tree, name):
        raise Unsupported(f"Model.__init__ reads the global {name!r}, which the problem computes when loaded "
                          "rather than writes as a literal (its value may differ where the judge runs)")
    return repr(value)


def _attribute_path(root, dotted: str):
    """The object ``dotted`` (``torch.fft``) names through attributes from ``root``, or None."""
    value = root
    for part in dotted.split(".")[1:]:
        value = getattr(value, part, None)
    return value


def _plain_literal(value) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain_literal(v) for v in value)
    if value is not None and not isinstance(value, (int, float, str)):
        return False
    try:
        return ast.literal_eval(repr(value)) == value  # false for inf and nan, which repr cannot restore
    except (ValueError, SyntaxError):
        return False


def _written_as_literal(tree: ast.Module, name: str) -> bool:
    """Every top-level statement binding ``name`` assigns it an expression of literals only."""
    found = False
    for stmt in tree.body:
        if not _binds(stmt, name):
            continue
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if value is None or not all(isinstance(n, _LITERAL_NODES) for n in ast.walk(value)):
            return False
        found = True
    return found


def _binds(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return stmt.name == name
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name.split(".")[0]) == name for a in stmt.names)
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(stmt))
