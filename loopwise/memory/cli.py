"""``loopwise memory ...``: a model's DRAM traffic bounds, its layer-by-layer baseline and a
whole-model plan on a scratchpad target."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import typer

from loopwise.errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

MODEL = typer.Argument(..., help="An ONNX model file (weights not needed: shapes are inferred), zoo:NAME "
                                  "(resnet50, mobilenet_v2, bert-base, gpt2) or torchvision:NAME.")
TARGET = typer.Option("neuroncore-v2", "--target", help="A built-in target (neuroncore-v2, gpu-sm-shared, "
                      "scratchpad-1mib, scratchpad-96mib) or a YAML file.")
ELEM = typer.Option(2, "--elem-bytes", help="Bytes per element (2: bf16).")
JSON = typer.Option(False, "--json", help="Print machine-readable JSON on stdout instead of tables.")
BATCH = typer.Option(1, "--batch", min=1, help="Batch size of a zoo or torchvision model (an ONNX file has its own).")
SEQ = typer.Option(None, "--seq", min=1, help="Sequence length of a text model (default: bert-base 128, gpt2 1024).")


def _load(model: str, elem_bytes: int, batch: int = 1, seq: int | None = None):
    if model.startswith(("zoo:", "torchvision:")):
        from loopwise.memory.torch_import import load_torch

        return load_torch(model, batch=batch, seq=seq, elem_bytes=elem_bytes)
    from loopwise.memory.onnx_import import load_onnx

    if Path(model).suffix.lower() != ".onnx":
        raise UserError(f"{model}: give an ONNX model (.onnx), zoo:NAME or torchvision:NAME")
    return load_onnx(Path(model), elem_bytes)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f}"


@app.command("bounds")
def bounds_cmd(model: str = MODEL, target: str = TARGET, elem_bytes: int = ELEM, batch: int = BATCH,
               seq: int = SEQ, as_json: bool = JSON) -> None:
    """The whole-model compulsory traffic, the layer-by-layer floor and the per-operator bounds."""
    from loopwise.memory.targets import load_target

    tgt = load_target(target)
    imported = _load(model, elem_bytes, batch, seq)
    g = imported.graph
    data = {"model": str(model), "target": tgt.name, "operators": len(g.operators),
            "compulsory_bytes": g.compulsory_bytes(), "layer_by_layer_floor_bytes": g.layer_by_layer_floor_bytes(),
            "operator_bounds_bytes": g.operator_bound_bytes(tgt.scratchpad.bytes),
            "folded": imported.folded, "unsupported": imported.unsupported, "generated": len(imported.generated)}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    from loopwise.core.console import console as make_console

    c = make_console()
    from loopwise.memory.imported import UNSUPPORTED

    unsupported = f", {UNSUPPORTED}: {imported.unsupported}" if imported.unsupported else ""
    c.print(f"[bold]{g.name}[/] on {tgt.name}: {len(g.operators)} operators ({len(imported.folded)} copies folded{unsupported})")
    c.print(f"  compulsory (weights, inputs, outputs once): {_mb(data['compulsory_bytes'])} MB")
    c.print(f"  sum of per-operator bounds at {tgt.scratchpad.bytes / 2**20:g} MiB: {_mb(data['operator_bounds_bytes'])} MB")
    c.print(f"  layer-by-layer floor (every tensor through DRAM): {_mb(data['layer_by_layer_floor_bytes'])} MB")


@app.command("baseline")
def baseline_cmd(model: str = MODEL, target: str = TARGET, elem_bytes: int = ELEM, batch: int = BATCH,
                 seq: int = SEQ, as_json: bool = JSON) -> None:
    """The layer-by-layer baseline: each operator alone with its own best tiling (exact traffic)."""
    from loopwise.memory.layerwise import best_tiling
    from loopwise.memory.targets import load_target

    tgt = load_target(target)
    g = _load(model, elem_bytes, batch, seq).graph
    t0, rows = time.perf_counter(), []
    from loopwise.core.console import console as make_console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=make_console(stderr=True), transient=True, disable=as_json) as bar:
        task = bar.add_task("tiling", total=len(g.operators))
        for op in g.operators:
            choice = best_tiling(op, tgt.scratchpad.bytes)
            rows.append({"operator": op.name, "traffic_bytes": choice.traffic_bytes, "buffer_bytes": choice.buffer_bytes,
                         "tiles": choice.tiles, "order": list(choice.order)})
            bar.advance(task)
    total = sum(r["traffic_bytes"] for r in rows)
    data = {"model": str(model), "target": tgt.name, "total_bytes": total, "compulsory_bytes": g.compulsory_bytes(),
            "ratio_to_compulsory": total / g.compulsory_bytes(), "seconds": round(time.perf_counter() - t0, 2),
            "operators": rows}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{g.name} layer by layer on {tgt.name}")
    for col in ("operator", "traffic MB", "buffer KB", "tiles", "order"):
        table.add_column(col, overflow="fold")
    for r in rows:
        tiles = " ".join(f"{k}={v}" for k, v in r["tiles"].items() if v != 1)
        table.add_row(r["operator"], _mb(r["traffic_bytes"]), f"{r['buffer_bytes'] / 1024:,.0f}", tiles, " ".join(r["order"]))
    c = make_console()
    c.print(table)
    c.print(f"total {_mb(total)} MB = {data['ratio_to_compulsory']:.2f}x the compulsory {_mb(data['compulsory_bytes'])} MB "
            f"({data['seconds']} s)")


RUNS_DIR = typer.Option("runs", "--runs-dir", help="Folder of runs.")


@app.command("plan")
def plan_cmd(model: str = MODEL, target: str = TARGET, elem_bytes: int = ELEM, batch: int = BATCH,
             seq: int = SEQ, html: Path = typer.Option(None, "--html", help="Also write an HTML report here."),
             per_operator: bool = typer.Option(False, "--per-operator", help="Print a row per operator too."),
             out: Path = typer.Option(None, "--out", help="Also write the plan's JSON, with its schedule, here "
                                                            "(for loopwise memory verify)."),
             runs_dir: str = RUNS_DIR,
             resume: str = typer.Option(None, "--resume", help="Continue this run (its inputs are the run's own)."),
             objective: str = typer.Option("traffic", "--objective", help="What the plan minimizes: traffic (DRAM "
                                           "bytes) or time (roofline time on the target; the report says where "
                                           "it groups otherwise than the least-traffic plan)."),
             as_json: bool = JSON) -> None:
    """A whole-model plan: consecutive operators grouped so that their intermediates stay in the
    scratchpad (operators too big to run whole are tiled alone); against the compulsory bound and
    the layer-by-layer baseline. The plan is a run in the run store (``loopwise runs list``,
    ``loopwise report RUN``): the planner proposes, the independent replay of ``memory verify``
    judges every candidate, and a plan that fails it is recorded as rejected, never a result."""
    from loopwise.memory.plan_run import resolve_inputs
    from loopwise.memory.run import create_run, open_run

    if resume:
        store, inputs = open_run(runs_dir, resume)
        if inputs["model"] != str(model):
            store.close()
            raise UserError(f"run {resume} plans {inputs['model']}, not {model}")
        imported = None
    else:
        inputs = resolve_inputs(model, target, elem_bytes, batch, seq, objective)
        imported = _load(model, elem_bytes, batch, seq)  # a bad model is an error before any run exists
        store = create_run(runs_dir, inputs)
    with _stoppable(store):
        outcome = _run_plan(store, inputs, imported, as_json)
        run_id = store.meta.run_id
        if outcome.status != "accepted":
            lines = outcome.verdicts["planner"]["summary"]
            raise PlanRejected(f"the plan fails its replay, so it is not a result (run {run_id} records it as "
                               "rejected): " + lines[0] + "; " + "; ".join(line.strip() for line in lines[1:]))
        if html is not None:
            from loopwise.memory.report import build_report

            try:
                build_report(store, html)
            except OSError as exc:
                raise UserError(f"cannot write the report to {html}: {exc.strerror}") from None
    data = {**outcome.data, "run_id": run_id}
    if out is not None:
        try:
            out.write_text(json.dumps(data), encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write the plan to {out}: {exc.strerror}") from None
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    _print_plan(data, per_operator)
    typer.echo(f"run {run_id} in {runs_dir} (loopwise report {run_id} --runs-dir {runs_dir})")
    if html is not None:
        typer.echo(f"report: {html}")


def _stoppable(store):
    """Ctrl-C or SIGTERM: what was recorded stays in the run, which is marked interrupted and
    closed, and the line that continues it is printed unwrapped so it can be pasted."""
    from loopwise.core.console import console as make_console
    from loopwise.core.run import interruptible
    from loopwise.memory.run import resume_line
    from rich.markup import escape

    err = make_console(stderr=True)
    return interruptible(store, lambda: resume_line(store), lambda line: err.print(escape(line), soft_wrap=True))


def _run_plan(store, inputs: dict, imported, as_json: bool):
    """The plan run, with a progress bar."""
    from loopwise.core.console import console as make_console
    from loopwise.memory.plan_run import run_plan
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    def load(model, elem_bytes, batch, seq):
        return imported if imported is not None else _load(model, elem_bytes, batch, seq)

    err = make_console(stderr=True)
    with Progress(TextColumn("planning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=as_json) as bar:
        task = bar.add_task("plan", total=None)
        return run_plan(store, inputs, load, progress=lambda done, total: bar.update(task, completed=done,
                                                                                     total=total))


def _print_plan(data: dict, per_operator: bool) -> None:
    from loopwise.core.console import console as make_console
    from loopwise.memory.imported import UNSUPPORTED
    from loopwise.memory.plan_json import describe_runs
    from rich.table import Table

    table = Table(title=f"{data['model']} on {data['target']}: {len(data['groups'])} groups")
    for col in ("group", "operators", "runs", "traffic MB", "peak KB", "kept on chip"):
        table.add_column(col, overflow="fold")
    for i, grp in enumerate(data["groups"]):
        ops = grp["operators"]
        names = ops[0] + (f" .. {ops[-1]} ({len(ops)})" if len(ops) > 1 else "")
        table.add_row(str(i), names, describe_runs(grp), _mb(grp["traffic_bytes"]),
                      f"{grp['peak_bytes'] / 1024:,.0f}", str(len(grp["resident"])))
    c = make_console()
    c.print(table)
    if per_operator:
        ops = Table(title="per operator (a group's loads charged to the first reader, its stores to the producer)")
        for col in ("operator", "group", "plan MB", "layer by layer MB", "bound MB"):
            ops.add_column(col, overflow="fold")
        for r in data["operators"]:
            ops.add_row(r["operator"], str(r["group"]), _mb(r["plan_bytes"]), _mb(r["layer_by_layer_bytes"]),
                        _mb(r["bound_bytes"]))
        c.print(ops)
    folded = data.get("operators_folded") or []
    c.print(f"{data['copies_folded']} copy operators folded into access maps"
            + (f"; {len(folded)} applied by the products that read them: {', '.join(folded)}" if folded else "")
            + (f"; {UNSUPPORTED}: {data['unsupported']}" if data["unsupported"] else ""))
    c.print(f"total {_mb(data['total_bytes'])} MB: {data['ratio_to_compulsory']:.3f}x the compulsory "
            f"{_mb(data['compulsory_bytes'])} MB, {data['ratio_to_layer_by_layer']:.3f}x layer by layer "
            f"({_mb(data['layer_by_layer_bytes'])} MB); {data['pairs_removed']} store/load pairs removed "
            f"({data['seconds']} s)")
    from loopwise.memory.plan_text import time_lines

    for line in time_lines(data):
        c.print(line)
    choices = data.get("choices")
    if choices:
        ms = lambda s: "-" if s is None else f"{s * 1e3:.3f} ms"  # noqa: E731
        c.print(f"objective {choices['objective']}: {ms(choices['plan_seconds'])}, {_mb(choices['plan_bytes'])} MB; the "
                f"least-traffic plan {ms(choices['least_traffic_seconds'])}, {_mb(choices['least_traffic_bytes'])} MB; "
                f"{len(choices['differ'])} stretches of operators grouped otherwise")
        for d in choices["differ"]:
            mine = ", ".join(f"{g['operators']} ops {g['runs']}" for g in d[f"by_{choices['objective']}"])
            theirs = ", ".join(f"{g['operators']} ops {g['runs']}" for g in d["by_traffic"])
            c.print(f"  {d['operators'][0]} .. {d['operators'][1]}: {mine} (least traffic: {theirs})")


class PlanRejected(UserError):
    """The planner's own plan fails the independent replay: a bug, reported instead of a result."""


@app.command("verify")
def verify_cmd(plan_file: Path = typer.Argument(..., help="A plan written by loopwise memory plan --out (or --json)."),
               as_json: bool = JSON) -> None:
    """Replay a plan's schedule slab by slab, independently of the planner: every buffer on chip
    against the capacity at every step, and the DRAM traffic recounted from its loads and stores
    against what the plan claims; where the plan names its model, the model is imported again and
    the schedule checked against its graph (every operator run, what each reads, the model's inputs
    and outputs). Exits with status 1 when any check fails."""
    from loopwise.memory.verify import PlanFormatError, as_dict, describe, load_plan, verify
    from loopwise.memory.verify_model import rebuild

    try:
        plan = load_plan(plan_file)
        graph, why_not = rebuild(plan)  # the model imported again: what the schedule is checked against
        verdict = verify(plan, graph, why_not)
    except PlanFormatError as exc:
        raise UserError(str(exc) if str(exc).startswith(str(plan_file)) else f"{plan_file}: {exc}") from None
    if as_json:
        typer.echo(json.dumps(as_dict(verdict), indent=2))
    else:
        for line in describe(verdict):
            typer.echo(line)
    if not verdict.ok:
        raise typer.Exit(1)


@app.command("compare")
def compare_cmd(model: Path = typer.Argument(..., help="An ONNX model file."),
                with_: str = typer.Option("zigzag", "--with", help="The tool to compare with (zigzag)."),
                target: str = TARGET, elem_bytes: int = ELEM,
                lpf: int = typer.Option(1, "--lpf", min=1, help="ZigZag's LOMA loop-prime-factor limit (more: slower)."),
                as_json: bool = JSON) -> None:
    """Layer by layer against ZigZag on the same memory hierarchy: each convolution's and matrix
    product's DRAM traffic from both tools (elements), and loopwise's whole-model plan beside them."""
    from loopwise.memory.planner import plan
    from loopwise.memory.targets import load_target
    from loopwise.memory.zigzag_compare import compare

    if with_ != "zigzag":
        raise UserError(f"--with {with_}: only zigzag is supported")
    tgt = load_target(target)
    if model.suffix.lower() != ".onnx" or not model.is_file():
        raise UserError(f"{model}: give an existing ONNX model file (ZigZag reads ONNX)")
    from loopwise.core.console import console as make_console

    g = _load(str(model), elem_bytes).graph
    err = make_console(stderr=True)
    t0 = time.perf_counter()
    waiting = err.status("ZigZag is searching its mappings, layer by layer", spinner="dots")
    with waiting if not as_json else contextlib.nullcontext():
        rows = compare(model, tgt, elem_bytes, lpf, graph=g)
    seconds = round(time.perf_counter() - t0, 1)
    whole = plan(g, tgt.scratchpad.bytes)
    zz_total, ours_total = sum(r.zigzag_total for r in rows), sum(r.loopwise_total for r in rows)
    data = {"model": str(model), "target": tgt.name, "layers": len(rows), "seconds": seconds,
            "zigzag_elements": zz_total, "loopwise_layer_by_layer_elements": ours_total,
            "worst_layer_deviation": max((abs(r.ratio - 1) for r in rows), default=0.0),
            "loopwise_plan_bytes_all_operators": whole.total_bytes, "compulsory_bytes": whole.compulsory_bytes,
            "rows": [{"layer": r.layer, "zigzag": r.zigzag_elements, "loopwise": r.loopwise_elements,
                      "ratio": round(r.ratio, 5)} for r in rows]}
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{model.name} on {tgt.name}: DRAM elements per layer, layer by layer")
    for col in ("layer", "ZigZag I / W / O", "loopwise I / W / O", "loopwise / ZigZag"):
        table.add_column(col, overflow="fold")
    for r in rows:
        fmt = lambda d: " / ".join(f"{d.get(k, 0):,}" for k in ("I", "W", "O"))  # noqa: E731
        table.add_row(r.layer, fmt(r.zigzag_elements), fmt(r.loopwise_elements), f"{r.ratio:.4f}")
    c = make_console()
    c.print(table)
    c.print(f"{len(rows)} layers: ZigZag {zz_total:,} elements, loopwise {ours_total:,} ({ours_total / zz_total:.4f}x), "
            f"worst layer {data['worst_layer_deviation'] * 100:.2f}% apart (ZigZag took {seconds} s).")
    c.print(f"loopwise's whole-model plan, every operator: {_mb(whole.total_bytes)} MB "
            f"({whole.total_bytes / whole.compulsory_bytes:.3f}x the compulsory {_mb(whole.compulsory_bytes)} MB).")
