import torch
print(torch.__version__, "allow_tf32", torch.backends.cuda.matmul.allow_tf32, "precision", torch.get_float32_matmul_precision(),
      "fp32_precision", getattr(torch.backends.cuda.matmul, "fp32_precision", None))
x = torch.randn(9, 1024, 512, device="cuda"); w = torch.randn(9, 512, 2048, device="cuda")
ref = torch.bmm(x.double(), w.double())
for tf32 in (False, True):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    out = torch.bmm(x, w)
    for _ in range(3): torch.bmm(x, w)
    torch.cuda.synchronize()
    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(20): torch.bmm(x, w)
    e.record(); torch.cuda.synchronize()
    print("bmm tf32", tf32, round(s.elapsed_time(e) / 20, 4), "ms; max err vs fp64", (out.double() - ref).abs().max().item())
torch.backends.cuda.matmul.allow_tf32 = False
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    torch.bmm(x, w); torch.cuda.synchronize()
print(prof.key_averages().table(row_limit=5))
