"""Where a Hugging Face policy's NaN comes from on a GPU: left-padded batches through SmolLM2 (or
``--policy``) as the training engine runs it (fp32 weights, bf16 autocast on CUDA), forward and
backward, three ways:

- ``padding_mask``: the model given the 2-D padding mask, torch's default attention kernels (how
  ``HFPolicy`` called it before it built its own mask): a left-padding query then has no key;
- ``padding_mask_no_cudnn``: the same with cuDNN's attention kernels left out;
- ``policy``: ``HFPolicy`` as it is (a padding query sees itself; no cuDNN kernels).

Per total length (64 past a multiple of 128 among them: the shapes where cuDNN's Hopper backward
is known to return NaN query gradients) and way, a row says whether the logits at real positions,
the logits at padding positions, the loss and the gradients hold a NaN or an infinity. The batch:
8 rows of random tokens, left-padded by 0 to all but 3 of the length; the loss is the
mean log-probability of each real token after a real one.

On the H200, after the two install calls of ``bench/smollm2_study.py``::

    source bench/remote_prelude.sh || exit 1; python3 bench/attention_nan_check.py --out $OUT/attention_nan.json

Here (a pipeline check; the CPU's kernels return 0 for a query without a key)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python bench/attention_nan_check.py --device cpu --policy MODEL_DIR --out /tmp/a.json
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WAYS = ("padding_mask", "padding_mask_no_cudnn", "policy")
PADDING = (0, 1, 5, 17, 40)  # padding of the rows; the rest pad all but 3 tokens, or half


def _batch(vocab, length: int, generator):
    import torch

    rows = len(PADDING) + 3
    ids = torch.randint(1, len(vocab.tokenizer), (rows, length), generator=generator)  # 0 is padding
    pads = [p for p in PADDING if p < length] + [length - 3, length // 2, 0]
    valid = torch.ones(len(pads), length, dtype=torch.bool)
    for row, pad in enumerate(pads):
        valid[row, :pad] = False
    ids = ids[:len(pads)].masked_fill(~valid, vocab.pad)
    return ids, valid


def _logits(policy, way: str, ids, valid):
    """Logits [B, T, V] the way named (see the module docstring)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from loopwise.training.hf_policy import _autocast

    if way == "policy":
        return policy(ids, valid)
    kernels = sdpa_kernel([b for b in SDPBackend.__members__.values() if b not in (
        SDPBackend.ERROR, SDPBackend.CUDNN_ATTENTION)]) if way.endswith("no_cudnn") else nullcontext()
    pos = (valid.long().cumsum(1) - 1).clamp(min=0)
    with _autocast(ids.device), kernels:
        out = policy.model(input_ids=policy.order[ids], attention_mask=valid.long(), position_ids=pos, use_cache=False)
    return policy._reorder(out.logits)  # the policy's id order, as its own forward gives it


def _check(policy, way: str, ids, valid, targets) -> dict:
    """One forward and backward pass; what in it is not finite."""
    import torch

    policy.zero_grad(set_to_none=True)
    logits = _logits(policy, way, ids, valid)
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, targets[..., None]).squeeze(-1)
    real = valid[:, :-1] & valid[:, 1:]  # a real token predicted from a real position
    loss = -logp.masked_fill(~real, 0.0).sum() / real.sum()
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    bad_grads = sum(int((~torch.isfinite(g)).any()) for g in grads)
    return {"real_logits_nan": bool(logits[valid].isnan().any()),
            "padding_logits_nan": bool(logits[~valid].isnan().any()),
            "loss_finite": bool(torch.isfinite(loss)), "nonfinite_grad_tensors": bad_grads, "grad_tensors": len(grads)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--policy", default="smollm2")
    p.add_argument("--device", default="cuda")
    p.add_argument("--lengths", default="63,64,128,192,200,320", help="total lengths, comma-separated")
    a = p.parse_args(argv)
    import torch

    from loopwise.training.hf_policy import load_hf_policy

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("attention_nan_check: no CUDA device (--device cpu for a pipeline check)", file=sys.stderr)
        return 2
    policy, vocab = load_hf_policy(a.policy, device=a.device)
    policy.eval()
    generator = torch.Generator().manual_seed(0)
    rows = [{"kind": "meta", "policy": a.policy, "torch": torch.__version__,
             "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
             "cudnn": torch.backends.cudnn.version(), "attention": policy.model.config._attn_implementation}]
    for length in (int(x) for x in a.lengths.split(",")):
        ids, valid = _batch(vocab, length, generator)
        targets = ids[:, 1:].to(a.device)
        ids, valid = ids.to(a.device), valid.to(a.device)
        for way in WAYS:
            row = {"kind": "check", "length": length, "way": way, **_check(policy, way, ids, valid, targets)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
