"""The CUDA binary tools behind the SASS profile: finding ``cuobjdump`` / ``nvdisasm`` / ``ptxas``
(CUDA's or Triton's bundle), running them on a cubin, a host binary with a fatbin, or PTX, reading
their resource reports, and compiling a Triton kernel ahead of time for its SASS and resources.

Cost: one disassembler process per cubin (≈0.4 s, mostly its start-up) plus a linear parse.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from loopwise.kernels.profile.sass import Resources, SassProfile, merge_resources, parse_sass


Tool = Literal["nvdisasm", "cuobjdump", "ptxas"]


_TOOL_TIMEOUT_S = 60


_EM_CUDA = 190  # ELF e_machine of a cubin; a host .so / executable with a fatbin is something else


class ToolNotFoundError(RuntimeError):
    """No CUDA binary tool of the needed name on PATH, in CUDA_HOME/bin or in Triton's bundled bin."""


class DisassemblyError(RuntimeError):
    """The disassembler ran but failed (not a cubin, unsupported architecture, ...)."""


def _triton_bin() -> Path | None:
    """Triton's bundled CUDA binaries, without importing Triton (import costs seconds)."""
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "backends" / "nvidia" / "bin"
    return path if path.is_dir() else None


def tool_dirs() -> list[Path]:
    """Folders searched after PATH, in order: ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, Triton's bin."""
    dirs = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    dirs.append(Path("/usr/local/cuda/bin"))
    triton_bin = _triton_bin()
    if triton_bin is not None:
        dirs.append(triton_bin)
    return dirs


def find_tool(name: Tool) -> Path:
    """Path of a CUDA binary tool, or :class:`ToolNotFoundError` saying where it was looked for."""
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    dirs = tool_dirs()
    for d in dirs:
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = ", ".join(str(d) for d in dirs) or "no other folder"
    raise ToolNotFoundError(f"{name} not found on PATH nor in {where}; install the CUDA toolkit "
                            f"or Triton (it bundles nvdisasm, cuobjdump and ptxas)")


def _run(cmd: list[str]) -> str:
    """Run a tool and return stdout; a failure becomes :class:`DisassemblyError` with its stderr."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DisassemblyError(f"{Path(cmd[0]).name} failed ({proc.returncode}): {tail[0]}")
    return proc.stdout


def _is_cubin(data: bytes) -> bool:
    """A bare CUDA ELF (what nvdisasm reads), as opposed to a host binary holding a fatbin."""
    return data[:4] == b"\x7fELF" and len(data) > 20 and int.from_bytes(data[18:20], "little") == _EM_CUDA


class _BinaryFile:
    """A path to the binary on disk: the given one, or a temporary file for bytes (tools need paths)."""

    def __init__(self, binary: bytes | Path | str) -> None:
        self._tmp: str | None = None
        if isinstance(binary, (bytes, bytearray)):
            fd, self._tmp = tempfile.mkstemp(suffix=".cubin")
            with os.fdopen(fd, "wb") as f:
                f.write(binary)
            self.path = Path(self._tmp)
        else:
            self.path = Path(binary)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            os.unlink(self._tmp)


def _disassemble_path(path: Path) -> tuple[str, Path]:
    """SASS of a file: nvdisasm for a cubin, cuobjdump for fatbins and host binaries (and as fallback)."""
    with open(path, "rb") as f:
        head = f.read(32)
    if _is_cubin(head):
        try:
            tool = find_tool("nvdisasm")
        except ToolNotFoundError:
            tool = find_tool("cuobjdump")
            return _run([str(tool), "-sass", str(path)]), tool
        return _run([str(tool), "-c", str(path)]), tool
    tool = find_tool("cuobjdump")
    return _run([str(tool), "-sass", str(path)]), tool


def disassemble(cubin: bytes | Path | str) -> str:
    """SASS text of a cubin (bytes or path), a fatbin or a CUDA extension ``.so``."""
    with _BinaryFile(cubin) as path:
        return _disassemble_path(path)[0]


def resource_usage(cubin: bytes | Path | str) -> dict[str, Resources]:
    """Registers, stack, local, shared and constant memory per function (``cuobjdump -res-usage``)."""
    with _BinaryFile(cubin) as path:
        text = _run([str(find_tool("cuobjdump")), "-res-usage", str(path)])
    return parse_resource_usage(text)


_RES_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):\s*$")


_RES_FIELD = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


def parse_resource_usage(text: str) -> dict[str, Resources]:
    """Parse ``cuobjdump -res-usage`` output: a ``Function name:`` line, then ``REG:n STACK:n ...``."""
    out: dict[str, Resources] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _RES_FUNCTION.match(line)
        if m:
            current = m.group(1)
            continue
        if current is None or "REG:" not in line:
            continue
        fields = {k: int(v) for k, v in _RES_FIELD.findall(line)}
        out[current] = Resources(registers=fields.get("REG"), stack_bytes=fields.get("STACK"),
                                 local_bytes=fields.get("LOCAL"),
                                 static_shared_bytes=fields.get("SHARED"),
                                 constant_bytes=fields.get("CONSTANT[0]"), sources=("res-usage",))
        current = None
    return out


_PTXAS_FUNCTION = re.compile(r"Compiling entry function '([^']+)'|Function properties for (\S+)")


_PTXAS_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


_PTXAS_USED = re.compile(r"Used (\d+) registers")


_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(text: str) -> dict[str, Resources]:
    """Parse the ``ptxas -v`` log: registers, stack frame, spill stores / loads, shared memory."""
    values: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _PTXAS_FUNCTION.search(line)
        if m:
            current = m.group(1) or m.group(2)
            values.setdefault(current, {})
            continue
        if current is None:
            continue
        fields = values[current]
        if (m := _PTXAS_SPILLS.search(line)):
            fields.update(stack=int(m.group(1)), spill_store=int(m.group(2)), spill_load=int(m.group(3)))
        if (m := _PTXAS_USED.search(line)):
            fields["registers"] = int(m.group(1))
        if (m := _PTXAS_SMEM.search(line)):
            fields["smem"] = int(m.group(1))
    return {name: Resources(registers=f.get("registers"), stack_bytes=f.get("stack"),
                            static_shared_bytes=f.get("smem"), spill_store_bytes=f.get("spill_store"),
                            spill_load_bytes=f.get("spill_load"), sources=("ptxas",))
            for name, f in values.items()}


def ptxas_candidates() -> list[Path]:
    """Every ptxas found, newest-named first: Triton's ``ptxas-blackwell`` reads the newest PTX."""
    found: list[Path] = []
    for name in ("ptxas-blackwell", "ptxas"):
        on_path = shutil.which(name)
        for candidate in ([Path(on_path)] if on_path else []) + [d / name for d in tool_dirs()]:
            if candidate.is_file() and os.access(candidate, os.X_OK) and candidate not in found:
                found.append(candidate)
    return found


def ptxas_resources(ptx: str, arch: str = "sm_90a") -> dict[str, Resources]:
    """Compile PTX with ``ptxas -v`` to read spills (the cubin itself does not record them).

    This is a compile, seconds for a big kernel, so it is kept out of the SASS step's cost. A ptxas
    older than the PTX's ``.version`` rejects it, so each one found is tried in turn.
    """
    candidates = ptxas_candidates()
    if not candidates:
        find_tool("ptxas")  # raises the ToolNotFoundError that says where it looked
    failure = "no ptxas ran"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        for ptxas in candidates:
            proc = subprocess.run([str(ptxas), "-v", "--regAllocOptLevel=2", f"--gpu-name={arch}", str(src),
                                   "-o", str(Path(tmp) / "kernel.cubin")],
                                  capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S * 5, check=False)
            if proc.returncode == 0:
                return parse_ptxas_log(proc.stderr + proc.stdout)
            lines = [ln for ln in proc.stderr.strip().splitlines() if "error" in ln.lower()]
            failure = f"{ptxas} failed ({proc.returncode}): {(lines or ['no output'])[0]}"
    raise DisassemblyError(failure)


def profile_cubin(cubin: bytes | Path | str, *, extra_resources: dict[str, Resources] | None = None) -> SassProfile:
    """SASS profile of a cubin, fatbin or CUDA extension ``.so``: disassemble, read resources, parse.

    ``extra_resources`` (e.g. spills from ptxas, Triton's dynamic shared memory) is merged over the
    ``-res-usage`` numbers, function by function.
    """
    with _BinaryFile(cubin) as path:
        start = time.perf_counter()
        text, tool = _disassemble_path(path)
        resources = resource_usage(path)
        disassemble_s = time.perf_counter() - start
    for name, extra in (extra_resources or {}).items():
        resources[name] = merge_resources(resources.get(name), extra)
    start = time.perf_counter()
    arch, kernels = parse_sass(text, resources)
    parse_s = time.perf_counter() - start
    return SassProfile(arch=arch, kernels=tuple(kernels), tool=str(tool), disassemble_s=disassemble_s,
                       parse_s=parse_s)


def compile_triton(kernel: Any, signature: dict[str, str], constexprs: dict[str, Any] | None = None, *,
                   num_warps: int = 4, num_stages: int | None = None, maxnreg: int | None = None,
                   arch: int = 90, aligned: tuple[str, ...] | None = None) -> Any:
    """Ahead-of-time Triton compile for ``sm_<arch>`` (no GPU needed); returns the compiled kernel.

    A real launch specializes arguments that are multiples of 16 (pointers from PyTorch are), and
    vector loads depend on that, so pointer arguments are marked aligned unless ``aligned`` names
    the aligned arguments explicitly.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(signature)
    if aligned is None:
        aligned = tuple(n for n, t in signature.items() if t.startswith("*"))
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    options: dict[str, Any] = {"num_warps": num_warps}
    if num_stages is not None:
        options["num_stages"] = num_stages
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    source = ASTSource(kernel, signature, constexprs or {}, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def triton_resources(compiled: Any, *, run_ptxas: bool = True) -> Resources:
    """Resources Triton knows (launch shared memory) plus spills from ``ptxas -v`` on its PTX."""
    meta = compiled.metadata
    extra = Resources(dynamic_shared_bytes=int(meta.shared), sources=("triton-metadata",))
    if not run_ptxas:
        return extra
    arch = f"sm_{meta.target.arch}{'a' if meta.target.arch >= 90 else ''}"
    ptxas = ptxas_resources(compiled.asm["ptx"], arch).get(meta.name)
    if ptxas is None:
        return extra
    # Only the spill numbers: registers and shared memory are read from the cubin itself, which
    # Triton built with its own ptxas options.
    spills = Resources(spill_store_bytes=ptxas.spill_store_bytes, spill_load_bytes=ptxas.spill_load_bytes,
                       sources=("ptxas",))
    return merge_resources(spills, extra)


def profile_triton(kernel: Any, signature: dict[str, str], constexprs: dict[str, Any] | None = None, *,
                   num_warps: int = 4, num_stages: int | None = None, maxnreg: int | None = None,
                   arch: int = 90, aligned: tuple[str, ...] | None = None,
                   run_ptxas: bool = True) -> SassProfile:
    """Compile a ``@triton.jit`` kernel ahead of time for ``sm_<arch>`` and profile its SASS.

    ``run_ptxas`` adds spill bytes (a second ptxas run on the PTX, not counted in the SASS cost).
    """
    compiled = compile_triton(kernel, signature, constexprs, num_warps=num_warps, num_stages=num_stages,
                              maxnreg=maxnreg, arch=arch, aligned=aligned)
    extra = {compiled.metadata.name: triton_resources(compiled, run_ptxas=run_ptxas)}
    return profile_cubin(compiled.asm["cubin"], extra_resources=extra)

