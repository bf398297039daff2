#!/usr/bin/env python3
"""Emits nn_reference.inc: PyTorch 1.13 outputs (float64) of torch.nn layers for kiln's layer tests.

For each case the module's state_dict, inputs, outputs and input/parameter gradients of
sum(output * R) (R fixed random) are written under "<case>.<name>". kiln loads the state dict
through load_state_dict, so the parameter names and shapes are checked too.

Run: /usr/bin/python3 tests/data/nn/gen_nn_reference.py > tests/data/nn/nn_reference.inc
"""
import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)
torch.manual_seed(1234)

entries = []


def put(name, t):
    t = t.detach()
    if t.dtype == torch.bool:
        t = t.to(torch.float64)
    entries.append((name, list(t.shape), t.reshape(-1).tolist()))


def put_state(case, module):
    for k, v in module.state_dict().items():
        put(f"{case}.state.{k}", v)


def grads_of(case, out, inputs, module, rname="R"):
    """Backward of sum(out * R); records R and the grads of inputs and parameters."""
    r = torch.randn_like(out)
    put(f"{case}.{rname}", r)
    (out * r).sum().backward(retain_graph=True)
    for n, t in inputs.items():
        if t.grad is not None:
            put(f"{case}.grad.{n}", t.grad)
    for n, p in module.named_parameters():
        if p.grad is not None:
            put(f"{case}.pgrad.{n}", p.grad)


def rnd(*shape, grad=True):
    t = torch.randn(*shape)
    if grad:
        t.requires_grad_()
    return t


# --- MultiheadAttention, seq-first, separate q/k/v, bool key_padding_mask + float attn_mask
m = nn.MultiheadAttention(8, 2)
put_state("mha_a", m)
q, k, v = rnd(3, 2, 8), rnd(4, 2, 8), rnd(4, 2, 8)
kpm = torch.tensor([[False, False, True, False], [False, False, False, True]])
am = torch.randn(3, 4)
out, w = m(q, k, v, key_padding_mask=kpm, attn_mask=am)
for n, t in dict(q=q, k=k, v=v, kpm=kpm, am=am, out=out, w=w).items():
    put(f"mha_a.{n}", t)
grads_of("mha_a", out, dict(q=q, k=k, v=v), m)

# --- MultiheadAttention, batch_first, self-attention, bool causal mask, per-head weights
m = nn.MultiheadAttention(6, 3, batch_first=True)
put_state("mha_b", m)
x = rnd(2, 5, 6)
causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
out, w = m(x, x, x, attn_mask=causal, average_attn_weights=False)
for n, t in dict(x=x, mask=causal, out=out, w=w).items():
    put(f"mha_b.{n}", t)
grads_of("mha_b", out, dict(x=x), m)

# --- TransformerEncoderLayer, post-norm, relu, seq-first, key padding mask (train mode, p = 0)
m = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0)
m.train()
put_state("tel_post", m)
src = rnd(5, 2, 8)
kpm = torch.tensor([[False] * 5, [False, False, False, True, True]])
out = m(src, src_key_padding_mask=kpm)
for n, t in dict(src=src, kpm=kpm, out=out).items():
    put(f"tel_post.{n}", t)
grads_of("tel_post", out, dict(src=src), m)

# --- TransformerEncoderLayer, pre-norm, gelu, batch_first, causal mask
m = nn.TransformerEncoderLayer(8, 4, dim_feedforward=12, dropout=0.0, activation="gelu",
                               batch_first=True, norm_first=True)
m.train()
put_state("tel_pre", m)
src = rnd(2, 4, 8)
causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
out = m(src, src_mask=causal)
for n, t in dict(src=src, mask=causal, out=out).items():
    put(f"tel_pre.{n}", t)
grads_of("tel_pre", out, dict(src=src), m)

# --- LSTM: 2 layers, bidirectional, batch_first, given h0/c0
m = nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True)
put_state("lstm", m)
x, h0, c0 = rnd(2, 5, 3), rnd(4, 2, 4), rnd(4, 2, 4)
out, (hn, cn) = m(x, (h0, c0))
for n, t in dict(x=x, h0=h0, c0=c0, out=out, hn=hn, cn=cn).items():
    put(f"lstm.{n}", t)
grads_of("lstm", out, dict(x=x, h0=h0, c0=c0), m)

# --- GRU: 2 layers, seq-first, given h0
m = nn.GRU(3, 4, num_layers=2)
put_state("gru", m)
x, h0 = rnd(5, 2, 3), rnd(2, 2, 4)
out, hn = m(x, h0)
for n, t in dict(x=x, h0=h0, out=out, hn=hn).items():
    put(f"gru.{n}", t)
grads_of("gru", out, dict(x=x, h0=h0), m)

# --- Bilinear
m = nn.Bilinear(3, 4, 2)
put_state("bilinear", m)
x1, x2 = rnd(5, 3), rnd(5, 4)
out = m(x1, x2)
for n, t in dict(x1=x1, x2=x2, out=out).items():
    put(f"bilinear.{n}", t)
grads_of("bilinear", out, dict(x1=x1, x2=x2), m)

# --- ConvTranspose2d with stride, padding, output_padding, groups
m = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
put_state("convt", m)
x = rnd(2, 4, 3, 3)
out = m(x)
put("convt.x", x)
put("convt.out", out)

# --- BatchNorm2d: two training steps, then eval; and momentum=None (cumulative average)
for case, mom in (("bn", 0.1), ("bn_cma", None)):
    m = nn.BatchNorm2d(3, momentum=mom)
    with torch.no_grad():
        m.weight.copy_(torch.randn(3))
        m.bias.copy_(torch.randn(3))
    put_state(case + ".init", m)
    x1, x2, x3 = rnd(4, 3, 2, 2, grad=False), rnd(4, 3, 2, 2, grad=False), rnd(2, 3, 2, 2,
                                                                                grad=False)
    m.train()
    y1 = m(x1)
    y2 = m(x2)
    m.eval()
    y3 = m(x3)
    for n, t in dict(x1=x1, x2=x2, x3=x3, y1=y1, y2=y2, y3=y3).items():
        put(f"{case}.{n}", t)
    put_state(case + ".final", m)

# --- Losses
logits = torch.randn(5, 4)
target = torch.tensor([0, 3, 1, 1, 2])
target_ign = torch.tensor([0, 3, -100, 1, 2])
cw = torch.rand(4) + 0.5
put("loss.logits", logits)
put("loss.target", target.to(torch.float64))
put("loss.target_ign", target_ign.to(torch.float64))
put("loss.cw", cw)
put("loss.ce", nn.CrossEntropyLoss(weight=cw, label_smoothing=0.1)(logits, target))
put("loss.ce_ign_sum", nn.CrossEntropyLoss(reduction="sum")(logits, target_ign))
put("loss.nll", nn.NLLLoss(weight=cw)(torch.log_softmax(logits, 1), target))
y = torch.randn(5, 4)
put("loss.y", y)
put("loss.mse", nn.MSELoss()(logits, y))
put("loss.smoothl1", nn.SmoothL1Loss(beta=0.5)(logits, y))
prob_t = torch.rand(5, 4)
pw = torch.rand(4) + 0.5
put("loss.prob_t", prob_t)
put("loss.pw", pw)
put("loss.bce", nn.BCEWithLogitsLoss(pos_weight=pw)(logits, prob_t))
put("loss.bce_none", nn.BCEWithLogitsLoss(reduction="none")(logits, prob_t))

print("// Generated by tests/data/nn/gen_nn_reference.py with PyTorch", torch.__version__,
      "- do not edit.")
print("#pragma once")
print("#include <cstdint>")
print("#include <vector>")
print("namespace nn_ref {")
print("struct Ref {")
print("  const char* name;")
print("  std::vector<int64_t> shape;")
print("  std::vector<double> data;")
print("};")
print("inline const std::vector<Ref>& refs() {")
print("  static const std::vector<Ref> r = {")
for name, shape, data in entries:
    vals = ", ".join(repr(float(x)) for x in data)
    print(f'    {{"{name}", {{{", ".join(str(s) for s in shape)}}}, {{{vals}}}}},')
print("  };")
print("  return r;")
print("}")
print("}  // namespace nn_ref")
