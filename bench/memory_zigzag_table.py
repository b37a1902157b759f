"""loopwise's whole-model plan against ZigZag's best layer-by-layer mappings, model by model: each
zoo model exported to ONNX (the shapes are what matter; weights are random), mapped by ZigZag
layer by layer on the hierarchy built from the target (:mod:`loopwise.memory.zigzag_compare`), and
planned by `loopwise memory plan zoo:MODEL --batch B --target T --out PLAN.json`, then replayed by
`loopwise memory verify PLAN.json` (both as whole commands).

    OMP_NUM_THREADS=1 python3 bench/memory_zigzag_table.py --models resnet50,mobilenet_v2 [--batch 32]
        [--target neuroncore-v2] [--work DIR] [--out FILE.csv] [--loopwise-layers]
    OMP_NUM_THREADS=1 python3 bench/memory_zigzag_table.py --models llama7b_layer_prefill,gpt2 --products

``--products`` is for models the exporter cannot hand to ZigZag whole: each matrix product of the
model as loopwise imports it goes to ZigZag alone as ``[m, k] x [k, n]`` (a batched product counts
as its batch of independent products, which is what a layer-by-layer mapping does with them), at
ZigZag's loop prime factor limit 7 (its search of big products at the default limit of 1 stays far
above what it finds at 7; at 8 it asks this machine for 86 GiB).

ZigZag counts only the layers it models (convolutions and matrix products: their inputs, weights
and outputs), in elements; they are turned into bytes at loopwise's element size (bf16: 2). The
plan counts every operator. ZigZag's per-layer numbers are cached in DIR, so a stopped run
continues. ``--loopwise-layers`` adds loopwise's own layer-by-layer traffic on the same ONNX layers.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

FIELDS = ["model", "batch", "target", "zigzag_layers", "zigzag_bytes", "zigzag_seconds", "plan_bytes",
          "plan_vs_zigzag", "verify", "loopwise_layers_bytes", "layer_floor_bytes", "plan_vs_layer_floor"]
LAYERS = ("conv", "convolution", "linear", "addmm", "matmul", "bmm", "mm")  # what ZigZag maps, as imported


def export_onnx(model: str, batch: int, path: Path) -> None:
    """The zoo model on the CPU with random weights (equal weights would be merged by the exporter,
    which ZigZag's parser then misreads), exported by the TorchScript exporter, shapes inferred."""
    import onnx
    import torch

    from loopwise.memory import zoo

    module, args, kwargs = zoo.build(f"zoo:{model}", batch)
    module = module.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()
        for b in module.buffers():
            b.zero_()
    args = tuple(torch.zeros(a.shape, dtype=a.dtype) for a in args)
    if model in ("bert-base", "gpt2"):  # a text model's keyword arguments, fixed inside a wrapper
        inner, fixed = module, dict(kwargs)

        class Text(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, ids):
                return self.inner(input_ids=ids, **fixed).last_hidden_state

        module, kwargs = Text(), {}
    torch.onnx.export(module, args, str(path), kwargs=kwargs or None, dynamo=False, opset_version=13,
                      input_names=["input"])
    onnx.save(static_shapes(onnx.load(str(path))), str(path))


def static_shapes(model):
    """``model`` with every shape inferred: a Shape of a tensor whose shape is known becomes a
    constant, and so does a Reshape's or Expand's target computed from constants alone (ViT's class
    token expanded to the batch), until nothing changes (ZigZag needs each layer's shapes)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    const = lambda name, value: helper.make_node(  # noqa: E731
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype=np.int64)))
    for _ in range(8):
        del model.graph.value_info[:]
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
        g = model.graph
        known = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                 for v in list(g.value_info) + list(g.input) + list(g.output)}
        inits = {i.name: i for i in g.initializer}
        nodes = [const(n.output[0], known[n.input[0]]) if n.op_type == "Shape" and not n.attribute
                 and known.get(n.input[0]) and all(known[n.input[0]]) else n for n in g.node]
        changed = sum(a is not b for a, b in zip(nodes, g.node))
        made = {o: k for k, n in enumerate(nodes) for o in n.output}
        for n in list(nodes):
            target = n.input[1] if n.op_type in ("Expand", "Reshape") else None
            if target not in made or nodes[made[target]].op_type == "Constant":
                continue
            cone, todo = set(), [n.input[1]]
            while todo:
                name = todo.pop()
                if name in made and name not in cone:
                    cone.add(name)
                    todo += [x for x in nodes[made[name]].input if x]
            sub = [nodes[k] for k in sorted({made[c] for c in cone})]
            needs = {x for s in sub for x in s.input if x} - cone
            if needs - set(inits) or any(s.op_type in ("Conv", "MatMul", "Gemm") for s in sub):
                continue
            graph = helper.make_graph(sub, "target", [], [helper.make_tensor_value_info(n.input[1], 7, None)],
                                      [inits[x] for x in needs])
            value = ReferenceEvaluator(helper.make_model(graph, opset_imports=model.opset_import)).run(None, {})[0]
            nodes[made[n.input[1]]] = const(n.input[1], value)
            changed += 1
        del g.node[:]
        g.node.extend(nodes)
        if not changed:
            break
    del model.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model)


def zigzag_layers(onnx_path: Path, target: str, cache: Path, lpf_limit: int = 1) -> dict:
    if not cache.exists():
        from loopwise.memory.targets import load_target
        from loopwise.memory.zigzag_compare import run_zigzag

        t0 = time.time()
        layers = run_zigzag(onnx_path, load_target(target), 2, lpf_limit)
        cache.write_text(json.dumps({"seconds": round(time.time() - t0, 1), "layers": layers}, indent=1))
    return json.loads(cache.read_text())


def layer_floor(model: str, batch: int) -> int:
    """Bytes that any layer-by-layer mapping of the model's convolutions and matrix products moves at
    least: each layer's input, weights and output once (for a model ZigZag is not given)."""
    from loopwise.memory.graph import operator_compulsory_bytes
    from loopwise.memory.torch_import import load_torch

    graph = load_torch(f"zoo:{model}", batch=batch, elem_bytes=2).graph
    return sum(operator_compulsory_bytes(op) for op in graph.operators if op.name.split(":")[0] in LAYERS)


def product_row(model: str, batch: int, target: str, lpf_limit: int, work: Path, plan_bytes: int) -> dict:
    """ZigZag's best mapping of each matrix product of the model (cached in ``work``), in bytes."""
    from loopwise.memory.targets import load_target
    from loopwise.memory.torch_import import load_torch
    from loopwise.memory.zigzag_compare import matrix_products, zigzag_products

    cache = work / f"zz_products_{model}_b{batch}_{target}_lpf{lpf_limit}.json"
    if not cache.exists():
        products = matrix_products(load_torch(f"zoo:{model}", batch=batch, elem_bytes=2).graph, LAYERS)
        t0 = time.time()
        moved = zigzag_products(products, load_target(target), 2, lpf_limit, work / "products")
        cache.write_text(json.dumps({"seconds": round(time.time() - t0, 1), "lpf_limit": lpf_limit,
                                     "products": moved}, indent=1))
    got = json.loads(cache.read_text())
    zz_bytes = 2 * sum(got["products"].values())
    return {"zigzag_layers": len(got["products"]), "zigzag_bytes": zz_bytes, "zigzag_seconds": got["seconds"],
            "plan_vs_zigzag": round(plan_bytes / zz_bytes, 4)}


def plan_and_verify(model: str, batch: int, target: str, work: Path) -> tuple[int, str]:
    plan = work / f"plan_{model}_b{batch}_{target}.json"
    cli = [sys.executable, "-m", "loopwise", "memory"]
    subprocess.run(cli + ["plan", f"zoo:{model}", "--batch", str(batch), "--target", target, "--out", str(plan)],
                   check=True, capture_output=True, text=True)
    verdict = subprocess.run(cli + ["verify", str(plan)], capture_output=True, text=True)
    return json.loads(plan.read_text())["total_bytes"], ("PASS" if verdict.returncode == 0 else "FAIL")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--target", default="neuroncore-v2")
    ap.add_argument("--work", type=Path, default=Path("/tmp/loopwise-zigzag-table"))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--loopwise-layers", action="store_true")
    ap.add_argument("--floor-only", action="store_true",
                    help="no ZigZag: the plan against the layer-by-layer floor (every layer's operands once)")
    ap.add_argument("--products", action="store_true",
                    help="for models that cannot be exported whole: ZigZag on each matrix product of the "
                         "model as loopwise imports it, one shape at a time (batched products: the batch "
                         "of independent products), beside the floor")
    ap.add_argument("--lpf-limit", type=int, default=None,
                    help="ZigZag's loop prime factor limit (default: 1 for whole models, 7 for --products)")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in a.models.split(","):
        onnx_path = a.work / f"{model}_b{a.batch}.onnx"
        if a.floor_only or a.products:
            plan_bytes, verdict = plan_and_verify(model, a.batch, a.target, a.work)
            floor = layer_floor(model, a.batch)
            row = dict.fromkeys(FIELDS, "") | {"model": model, "batch": a.batch, "target": a.target,
                                               "plan_bytes": plan_bytes, "verify": verdict, "layer_floor_bytes": floor,
                                               "plan_vs_layer_floor": round(plan_bytes / floor, 4)}
            if a.products:
                row |= product_row(model, a.batch, a.target, a.lpf_limit or 7, a.work, plan_bytes)
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        if not onnx_path.exists():
            export_onnx(model, a.batch, onnx_path)
        zz = zigzag_layers(onnx_path, a.target, a.work / f"zz_{model}_b{a.batch}_{a.target}.json", a.lpf_limit or 1)
        zz_bytes = 2 * sum(sum(v.values()) for v in zz["layers"].values())
        plan_bytes, verdict = plan_and_verify(model, a.batch, a.target, a.work)
        row = {"model": model, "batch": a.batch, "target": a.target, "zigzag_layers": len(zz["layers"]),
               "zigzag_bytes": zz_bytes, "zigzag_seconds": zz["seconds"], "plan_bytes": plan_bytes,
               "plan_vs_zigzag": round(plan_bytes / zz_bytes, 4), "verify": verdict, "loopwise_layers_bytes": "",
               "layer_floor_bytes": "", "plan_vs_layer_floor": ""}
        if a.loopwise_layers:
            from loopwise.memory.onnx_import import load_onnx
            from loopwise.memory.targets import load_target
            from loopwise.memory.zigzag_compare import loopwise_layers

            ours = loopwise_layers(load_onnx(onnx_path, 2).graph, load_target(a.target), set(zz["layers"]))
            row["loopwise_layers_bytes"] = 2 * sum(sum(v.values()) for v in ours.values())
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.out:
        with a.out.open("w", newline="") as fh:
            w = csv.DictWriter(fh, FIELDS)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
