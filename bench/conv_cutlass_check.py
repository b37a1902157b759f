"""CUTLASS's 3xTF32 implicit-GEMM convolution against cuDNN's fp32 one, convolution by convolution.

For each problem file, the convolutions its Model runs (1-3 d, one group; transposed ones as the
forward convolution they equal where the stride is 1, else as CUTLASS's 1-d or 2-d data gradient, or
as one 3-d forward convolution per stride phase; found by hooks on one forward pass) are timed on
inputs of the shapes they met there: cuDNN in fp32 (TF32 off, as the fp32 policy's eager and
torch.compile run it), and ours for each tile: the input made channels-last with its channels padded
to a multiple of 4, CUTLASS's kernel, the output back in the reference's layout with the bias added
(what a candidate pays), and the kernel alone. Both are compared with a float64 convolution of the
same inputs. CUDA events, median of --repeats calls.

    python bench/conv_cutlass_check.py PROBLEM.py... --out DIR [--repeats 20] [--budget-s 480]

Writes DIR/rows.jsonl (one row per convolution, after each): per tile ``<tile>_ms`` (with the
copies) and ``<tile>_kernel_ms`` (CUTLASS's launches alone); where the form runs a convolution
through the few-channel iterators (``few_channels``), the optimized iterators' times and the
few-channel ones' (``<tile>_few_...``) both; ``best_over_cudnn`` (the fastest of them all) and
``form_over_cudnn`` (the fastest of those the candidate's form takes).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import math
import os
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from loopwise.kernels import backends
from loopwise.kernels.expert.cutlass_conv import (CONFIGS, DECLARATION, DGRAD_CONFIGS, channels_last_conv,
                                                  extension_source, few_channels, transposed_mode)

from inductor_seed_check import _time  # CUDA events, median; this folder, as Python runs a script

FUNCS = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _build(dims: int, config: str, dgrad: bool = False, few: bool = False):
    from torch.utils.cpp_extension import load_inline

    name = f"lw_{'dgrad' if dgrad else 'conv'}{dims}d{'_few' if few else ''}_{config}"
    return load_inline(name=name, cpp_sources=DECLARATION,
                       cuda_sources=extension_source(dims, config, dgrad=dgrad, few=few),
                       functions=["lw_conv"], extra_cuda_cflags=["-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr"],
                       extra_include_paths=backends.cutlass_include_dirs(), verbose=False,
                       with_pytorch_error_handling=True, build_directory=backends._build_dir(f"{name}_bench"))


def convolutions(path: Path) -> list[dict]:
    """The problem's convolutions (one group; transposed ones that CUTLASS's form runs, see
    ``transposed_mode``; an ``output_size`` given to a transposed one's forward is not seen), each
    with the input shape it met."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(42)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    found, seen = [], set()

    def hook(conv, args):
        key = (type(conv), tuple(args[0].shape), conv.weight.shape, conv.stride, conv.padding, conv.dilation,
               getattr(conv, "output_padding", None))
        transposed = isinstance(conv, torch.nn.modules.conv._ConvTransposeNd) and transposed_mode(
            conv.stride, conv.padding, conv.dilation, conv.kernel_size, conv.output_padding)
        if transposed == "":
            return
        if key not in seen and conv.groups == 1 and isinstance(conv.padding, tuple) \
                and conv.padding_mode == "zeros" and args[0].dtype == torch.float32:
            seen.add(key)
            found.append({"shape": tuple(args[0].shape), "weight": conv.weight.detach().clone(),
                          "bias": None if conv.bias is None else conv.bias.detach().clone(),
                          "stride": conv.stride, "padding": conv.padding, "dilation": conv.dilation,
                          "transposed": transposed or None,
                          "output_padding": conv.output_padding if transposed else None})

    handles = [m.register_forward_pre_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose1d,
                                 torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d))]
    with torch.no_grad():
        model(*inputs)
    for h in handles:
        h.remove()
    del model, inputs
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=480)
    parser.add_argument("--per-problem", type=int, default=2, help="convolutions timed per problem")
    args = parser.parse_args()
    start = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = args.out / "rows.jsonl"
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # one architecture: half the build
    with concurrent.futures.ThreadPoolExecutor(len(CONFIGS) + len(DGRAD_CONFIGS) + 4) as pool:
        jobs = {(dims, c, False, False): pool.submit(_build, dims, c) for dims in (2, 3) for c in CONFIGS
                if dims == 2 or c != "256x64"}
        jobs.update({(2, c, True, False): pool.submit(_build, 2, c, True) for c in DGRAD_CONFIGS})
        jobs.update({(2, c, False, True): pool.submit(_build, 2, c, False, True) for c in CONFIGS if c != "256x64"})
        built = {}
        for key, job in jobs.items():
            try:
                built[key] = job.result()
            except Exception as exc:  # noqa: BLE001 - a tile that does not build is a row
                with rows.open("a") as f:
                    f.write(json.dumps({"build": key, "error": str(exc)[-2000:]}) + "\n")
    print(f"built {sorted(built)} in {time.time() - start:.0f} s", flush=True)
    for path in args.problems:
        if time.time() - start > args.budget_s:
            print("budget spent", flush=True)
            break
        try:
            convs = convolutions(path)[:args.per_problem]
        except Exception:  # noqa: BLE001
            with rows.open("a") as f:
                f.write(json.dumps({"problem": path.stem, "error": traceback.format_exc()[-1500:]}) + "\n")
            continue
        for i, conv in enumerate(convs):
            dims = len(conv["shape"]) - 2
            torch.manual_seed(i)
            x = torch.randn(conv["shape"], device="cuda")
            w, b = conv["weight"], conv["bias"]
            opts = {k: conv[k] for k in ("stride", "padding", "dilation")}
            torch_conv = (TRANSPOSED if conv["transposed"] else FUNCS)[dims]
            if conv["output_padding"]:
                opts["output_padding"] = conv["output_padding"]
            cudnn = lambda: torch_conv(x, w, b, **opts)  # noqa: E731
            ref32 = cudnn()
            ref64 = torch_conv(x.double(), w.double(), None if b is None else b.double(), **opts)
            scale = ref64.norm().item()
            row = {"problem": path.stem, "conv": i, "input": list(conv["shape"]), "weight": list(w.shape),
                   **{k: list(v) for k, v in opts.items()}, "bias": b is not None, "transposed": conv["transposed"],
                   # a transposed one's output element sums over 1 / (product of strides) of its taps
                   "gflop": 2 * ref32.numel() * (w.shape[0] * w[0, 0].numel() / math.prod(conv["stride"])
                                                 if conv["transposed"] else w[0].numel()) / 1e9,
                   "cudnn_ms": _time(cudnn, (), args.repeats),
                   "cudnn_rel_err": ((ref32.double() - ref64).norm() / scale).item()}
            dgrad = conv["transposed"] == "dgrad"
            # the few-channel iterators beside the optimized ones wherever the form would take them
            few = few_channels(dims, w.shape[0] if conv["transposed"] else w.shape[1], dgrad=dgrad)
            labels = []
            for config in DGRAD_CONFIGS if dgrad else CONFIGS:
                for variant in (False, True) if few else (False,):
                    label = f"{config}_few" if variant else config
                    ext = built.get((3 if dims == 3 else 2, config, dgrad, variant))
                    if ext is None:
                        continue
                    labels.append(label)
                    try:
                        ours = lambda: channels_last_conv(  # noqa: E731
                            ext.lw_conv, x, w, b, **opts, transposed=conv["transposed"])  # output_padding in opts
                        out = ours()
                        row[f"{label}_rel_err"] = ((out.double() - ref64).norm() / scale).item()
                        row[f"{label}_max_abs_vs_cudnn"] = (out - ref32).abs().max().item()
                        row[f"{label}_ms"] = _time(ours, (), args.repeats)
                        del out
                        launches = []  # CUTLASS's launches alone, on channels-last copies made once
                        channels_last_conv(lambda *a: launches.append(a), x, w, None, **opts,
                                           transposed=conv["transposed"])
                        row[f"{label}_kernel_ms"] = _time(lambda: [ext.lw_conv(*a) for a in launches], (), args.repeats)
                        del launches
                    except Exception as exc:  # noqa: BLE001
                        row[f"{label}_error"] = str(exc)[-500:]
            best = min((row[f"{c}_ms"] for c in labels if f"{c}_ms" in row), default=None)
            row["best_over_cudnn"] = None if best is None else row["cudnn_ms"] / best
            # what a candidate runs: the few-channel iterators where the form takes them
            taken = min((row[f"{c}_ms"] for c in labels if f"{c}_ms" in row and c.endswith("_few") == few), default=None)
            row["form_over_cudnn"] = None if taken is None else row["cudnn_ms"] / taken
            with rows.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: row[k] for k in ("problem", "conv", "cudnn_ms", "best_over_cudnn", "form_over_cudnn")}),
                  flush=True)
            del x, ref32, ref64
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
