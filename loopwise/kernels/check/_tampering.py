"""Rules against tampering with the judge: patched clocks and libraries, threads, processes, lazy outputs."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from loopwise.kernels.check._codes import RuleMatch
from loopwise.kernels.check._source import SourceIndex, constant_str, line_of

_TIMERS = {
    "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.cuda.Event.query", "torch.cuda.Event.wait",
    "torch.cuda.synchronize", "torch.cuda.Stream.synchronize", "torch.cuda.Stream",
    "torch.Event", "torch.Event.elapsed_time", "torch.Event.record", "torch.Event.synchronize",
    "time.perf_counter", "time.perf_counter_ns", "time.time", "time.time_ns", "time.monotonic",
    "time.monotonic_ns", "time.process_time", "time.process_time_ns", "time.thread_time",
    "triton.testing.do_bench", "triton.testing.do_bench_cudagraph", "timeit.default_timer",
    "torch.utils.benchmark.Timer", "torch._C._cuda_synchronize",
}
# Any attribute written on these objects is a patch of the timing machinery.
_TIMER_OWNERS = {
    "time", "timeit", "torch.cuda", "torch.cuda.Event", "torch.cuda.Stream", "torch.Event",
    "torch.Stream", "triton.testing", "torch.utils.benchmark",
}
_TIMER_ATTRS = {"elapsed_time", "perf_counter", "perf_counter_ns", "synchronize", "record", "do_bench",
                "monotonic", "time"}
_HIDDEN_TIMER_ATTRS = {"elapsed_time", "perf_counter", "perf_counter_ns", "do_bench", "synchronize"}
_PATCHABLE_ROOTS = {"torch", "triton", "numpy", "builtins", "math", "operator", "functools"}
# Settings meant to be written; precision-relevant ones are judged by the precision rule.
_SETTINGS = ("torch.backends.", "torch._dynamo.config.", "torch._inductor.config.", "triton.knobs.")
_SETATTR = {"setattr", "builtins.setattr", "object.__setattr__", "type.__setattr__"}
_MOCK = re.compile(r"^(unittest\.mock\.)?patch(\.object|\.multiple|\.dict)?$|\.setattr$")

_THREAD_MODULES = ("threading", "_thread", "concurrent", "multiprocessing", "asyncio",
                   "torch.multiprocessing", "torch.jit.fork", "torch.jit._fork", "torch.futures")
_PROCESS_MODULES = ("subprocess", "socket", "ctypes", "cffi", "pty", "signal", "urllib", "http",
                    "requests", "pexpect", "ftplib", "smtplib", "telnetlib", "webbrowser")
_PROCESS_OS = re.compile(r"^os\.(system|popen|fork|forkpty|exec\w*|spawn\w*|posix_spawn\w*|kill|killpg)$")
_C_THREAD = re.compile(r"\bstd::(?:thread|jthread|async)\b|\bpthread_create\b|\bthrd_create\b")
# Reading the environment: os.environ in every spelling, getenv in C, the /proc copy of it.
_ENVIRON_NAMES = {"os.environ", "os.environb", "os.getenv", "os.getenvb", "posix.environ", "nt.environ"}
_ENVIRON_ATTRS = {"environ", "environb", "getenv", "getenvb"}
_C_ENVIRON = re.compile(r"\b(?:secure_)?getenv\s*\(|\b_?environ\b")
_TENSOR_BASES = {"torch.Tensor", "torch.nn.Parameter"}
_LAZY_NAMES = {"__torch_function__", "__torch_dispatch__", "_make_subclass", "_make_wrapper_subclass",
               "as_subclass"}
_LAZY_MODULES = ("torch.utils._python_dispatch", "torch._subclasses", "torch.overrides")


def _in_modules(name: str, modules: tuple[str, ...]) -> str | None:
    for module in modules:
        if name == module or name.startswith(module + "."):
            return module
    return None


def _imported_modules(index: SourceIndex) -> Iterator[tuple[ast.AST, str]]:
    for node in ast.walk(index.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, node.module
            for alias in node.names:
                yield node, f"{node.module}.{alias.name}"
    for call, name in index.calls():
        if name in ("__import__", "importlib.import_module") and call.args:
            module = constant_str(call.args[0])
            if module:
                yield call, module


# -- timer_patch and library_patch ------------------------------------------------------------


def _patch_finding(index: SourceIndex, node: ast.AST, target: str, how: str) -> RuleMatch | None:
    owner = target.rsplit(".", 1)[0]
    if target in _TIMERS or owner in _TIMER_OWNERS:
        return RuleMatch("timer_patch", line_of(node), f"{how} `{target}`")
    root = target.split(".")[0]
    if root in _PATCHABLE_ROOTS and not target.startswith(_SETTINGS) and "." in target:
        return RuleMatch("library_patch", line_of(node), f"{how} `{target}`",
                       "a patched library function changes what the judge computes or measures")
    return None


def _assigned_targets(stmt: ast.AST) -> list[ast.AST]:
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        return [stmt.target]
    if isinstance(stmt, ast.Delete):
        return list(stmt.targets)
    return []


def _hidden_timer_target(target: ast.AST) -> bool:
    """``getattr(torch, "cuda").synchronize = f``: a timer name on an object we cannot resolve."""
    return isinstance(target, ast.Attribute) and target.attr in _HIDDEN_TIMER_ATTRS and \
        not (isinstance(target.value, ast.Name) and target.value.id == "self")


def _dict_owner(index: SourceIndex, target: ast.AST) -> str | None:
    """``time.__dict__[k]`` or ``vars(time)[k]`` as an assignment target: the patched object."""
    if not isinstance(target, ast.Subscript):
        return None
    value = target.value
    if isinstance(value, ast.Attribute) and value.attr == "__dict__":
        return index.qualname(value.value)
    if isinstance(value, ast.Call) and index.call_name(value) == "vars" and value.args:
        return index.qualname(value.args[0])
    return None


def find_patches(index: SourceIndex) -> Iterator[RuleMatch]:
    """Assignments, setattr calls and mock patches that replace library or timer attributes."""
    for node in ast.walk(index.tree):
        for target in _assigned_targets(node):
            name = index.qualname(target) if isinstance(target, ast.Attribute) else None
            if name is None and (owner := _dict_owner(index, target)):
                key = constant_str(target.slice) or "?"  # type: ignore[attr-defined]
                name = f"{owner}.{key}"
            how = "Deleting" if isinstance(node, ast.Delete) else "Assigning to"
            if name and (finding := _patch_finding(index, node, name, how)):
                yield finding
            elif name is None and _hidden_timer_target(target):
                yield RuleMatch("timer_patch", line_of(node), f"{how} `{ast.unparse(target)}`")
    for call, name in index.calls():
        if name in _SETATTR or (name and _MOCK.search(name)):
            yield from _setattr_patch(index, call, name)


def _setattr_patch(index: SourceIndex, call: ast.Call, name: str) -> Iterator[RuleMatch]:
    if not call.args:
        return
    first = call.args[0]
    text = constant_str(first)
    if text is not None:  # mock.patch("time.perf_counter") / monkeypatch.setattr("time.time", f)
        finding = _patch_finding(index, call, text, f"Patching (`{name}`)")
        if finding is None and "mock" in name:
            finding = RuleMatch("library_patch", line_of(call), f"`{name}` of `{text}`")
        if finding:
            yield finding
        return
    owner = index.qualname(first)
    attr = constant_str(call.args[1]) if len(call.args) > 1 else None
    if owner is None:
        if attr in _TIMER_ATTRS:
            yield RuleMatch("timer_patch", line_of(call), f"`{name}` of attribute `{attr}`")
        return
    finding = _patch_finding(index, call, f"{owner}.{attr or '?'}", f"`{name}` on")
    if finding:
        yield finding


# -- threads and processes --------------------------------------------------------------------


def _module_uses(index: SourceIndex, modules: tuple[str, ...]) -> Iterator[tuple[ast.AST, str]]:
    for node, module in _imported_modules(index):
        if hit := _in_modules(module, modules):
            yield node, hit
    for node, name in index.names():
        if hit := _in_modules(name, modules):
            yield node, name


def find_threads(index: SourceIndex) -> Iterator[RuleMatch]:
    """Threads, thread pools, processes and async tasks (work that can outlive ``forward``), in
    Python and in embedded C++/CUDA. An OpenMP region is not one: it joins its threads before the
    call returns."""
    why = "work on another thread or task can run outside the judge's timing"
    for node, name in _module_uses(index, _THREAD_MODULES):
        yield RuleMatch("thread_injection", line_of(node), f"Use of `{name}`", why)
    for text in index.c_texts():
        for match in _C_THREAD.finditer(text.text):
            yield RuleMatch("thread_injection", text.line_of(match.start()), f"C++ `{match.group(0)}`", why)


def find_processes(index: SourceIndex) -> Iterator[RuleMatch]:
    """Shell commands, subprocesses, sockets and foreign-function calls."""
    for node, name in _module_uses(index, _PROCESS_MODULES):
        yield RuleMatch("process_spawn", line_of(node), f"Use of `{name}`")
    for node, name in index.names():
        if _PROCESS_OS.match(name):
            yield RuleMatch("process_spawn", line_of(node), f"Use of `{name}`")


# -- environment_read ------------------------------------------------------------------------


def find_environment_reads(index: SourceIndex) -> Iterator[RuleMatch]:
    """Reads of environment variables: ``os.environ`` / ``os.getenv`` however imported, an
    ``environ`` or ``getenv`` attribute of anything, a string naming it (``getattr(os, "environ")``,
    ``/proc/self/environ``), and ``getenv`` / ``environ`` in embedded C/C++/CUDA. Setting a
    variable (``os.environ["TRITON_F32_DEFAULT"] = "ieee"``) reads nothing and is allowed."""
    for node in ast.walk(index.tree):
        if isinstance(node, ast.Attribute) and node.attr in _ENVIRON_ATTRS and not _env_write(index, node):
            yield RuleMatch("environment_read", line_of(node), f"Use of `{ast.unparse(node)}`")
    for node, name in index.names():
        if ".".join(name.split(".")[:2]) in _ENVIRON_NAMES and not _env_write(index, node):
            yield RuleMatch("environment_read", line_of(node), f"Use of `{name}`")
    for node in index.strings():
        if "environ" in node.value or node.value in _ENVIRON_ATTRS:
            yield RuleMatch("environment_read", line_of(node), f"The string {node.value[:40]!r}")
    for text in index.c_texts():
        for match in _C_ENVIRON.finditer(text.text):
            yield RuleMatch("environment_read", text.line_of(match.start()), f"C++ `{match.group(0).strip()}`")


def _env_write(index: SourceIndex, node: ast.AST) -> bool:
    """Whether ``node`` is the mapping of an item assignment or deletion (``os.environ[k] = v``)."""
    parent = index.parents.get(node)
    return isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, (ast.Store, ast.Del))


# -- lazy outputs -----------------------------------------------------------------------------


def _tensor_classes(index: SourceIndex) -> dict[str, ast.ClassDef]:
    """Classes of the source that derive from torch.Tensor, directly or through each other."""
    found: dict[str, ast.ClassDef] = {}
    classes = [n for n in ast.walk(index.tree) if isinstance(n, ast.ClassDef)]
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name in found:
                continue
            bases = {index.qualname(b) for b in cls.bases}
            if bases & (_TENSOR_BASES | set(found)):
                found[cls.name] = cls
                changed = True
    return found


def find_lazy(index: SourceIndex) -> Iterator[RuleMatch]:
    """Tensor subclasses, torch function/dispatch hooks, and forward returning non-tensor wrappers."""
    for name, cls in _tensor_classes(index).items():
        yield RuleMatch("lazy_eval", cls.lineno, f"Class `{name}` subclasses torch.Tensor",
                      "a Tensor subclass can defer its work until the judge reads it")
    for node in ast.walk(index.tree):
        label = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _LAZY_NAMES:
            label = f"Definition of `{node.name}`"
        elif isinstance(node, ast.Attribute) and node.attr in _LAZY_NAMES:
            label = f"Use of `{node.attr}`"
        elif isinstance(node, ast.Name) and node.id in _LAZY_NAMES:
            label = f"Use of `{node.id}`"
        if label:
            yield RuleMatch("lazy_eval", line_of(node), label)
    for node, name in _module_uses(index, _LAZY_MODULES):
        yield RuleMatch("lazy_eval", line_of(node), f"Use of `{name}`")
    yield from _wrapper_returns(index)


def _wrapper_returns(index: SourceIndex) -> Iterator[RuleMatch]:
    forward = index.method(index.modelnew, "forward")
    if forward is None:
        return
    local_classes = {n.name for n in ast.walk(index.tree) if isinstance(n, ast.ClassDef)}
    local_classes -= {"ModelNew", "Model"}
    for node in _own_nodes(forward):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            yield RuleMatch("lazy_eval", line_of(node), "`yield` in ModelNew.forward",
                          "forward must return tensors, not a generator")
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = node.value
        if isinstance(value, (ast.Lambda, ast.GeneratorExp)):
            yield RuleMatch("lazy_eval", node.lineno, "ModelNew.forward returns a callable or generator")
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in local_classes:
            yield RuleMatch("lazy_eval", node.lineno, f"ModelNew.forward returns a `{value.func.id}` object",
                          "forward must return plain tensors, not wrapper objects")


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function body, not descending into nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
