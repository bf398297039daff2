#!/usr/bin/env python3
"""Generates optim_reference.inc: parameter trajectories of torch.optim (PyTorch 1.13, float64,
foreach=False) on a fixed small problem, and learning-rate sequences of torch.optim.lr_scheduler.
tests/frontend/test_optim.cpp includes the output; the tests never need PyTorch.

    apt-get install -y python3-torch
    /usr/bin/python3 tests/data/optim/gen_optim_reference.py > tests/data/optim/optim_reference.inc

The problem (the C++ test builds the same one from the data emitted here):
    loss(W, b) = mean((X @ W.T + b - Y)^2) + 0.01 * sum(W^4)
with X [5, 4], Y [5, 3], W [3, 4], b [3]. Rosenbrock: f(x, y) = (1 - x)^2 + 100 (y - x^2)^2.
"""
import math

import torch

torch.set_default_dtype(torch.float64)
STEPS = 8


def fixed(n, m, a, c):
    return torch.tensor([[math.sin(a * (i * m + j) + c) for j in range(m)] for i in range(n)])


X = fixed(5, 4, 0.7, 0.3)
Y = fixed(5, 3, 1.3, -0.2) * 0.5
W0 = fixed(3, 4, 0.45, 1.1) * 0.8
B0 = torch.tensor([0.1, -0.2, 0.3])
R0 = torch.tensor([-1.2, 1.0])


def lsq_loss(W, b):
    return ((X @ W.T + b - Y) ** 2).mean() + 0.01 * (W ** 4).sum()


def rosenbrock(p):
    return (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2


def fmt(values):
    return ", ".join(repr(float(v)) for v in values)


out = []


def emit_array(name, values):
    out.append("inline const std::vector<double> %s = {%s};" % (name, fmt(values)))


emit_array("kX", X.flatten())
emit_array("kY", Y.flatten())
emit_array("kW0", W0.flatten())
emit_array("kB0", B0.flatten())
emit_array("kRosen0", R0.flatten())


def trajectory(name, make_opt, groups=False):
    W = W0.clone().requires_grad_()
    b = B0.clone().requires_grad_()
    opt = make_opt(W, b)
    rows = []
    for _ in range(STEPS):
        opt.zero_grad()
        lsq_loss(W, b).backward()
        opt.step()
        rows.append(torch.cat([W.detach().flatten(), b.detach().flatten()]))
    emit_array("k_" + name, torch.stack(rows).flatten())


trajectory("sgd_plain", lambda W, b: torch.optim.SGD([W, b], lr=0.1, foreach=False))
trajectory("sgd_momentum", lambda W, b: torch.optim.SGD(
    [W, b], lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=False))
trajectory("sgd_nesterov", lambda W, b: torch.optim.SGD(
    [W, b], lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.05, foreach=False))
trajectory("sgd_maximize", lambda W, b: torch.optim.SGD(
    [W, b], lr=0.02, momentum=0.5, maximize=True, foreach=False))
trajectory("sgd_groups", lambda W, b: torch.optim.SGD(
    [{"params": [W], "lr": 0.1, "momentum": 0.9}, {"params": [b]}], lr=0.01, foreach=False))

trajectory("adam_default", lambda W, b: torch.optim.Adam([W, b], lr=0.01, foreach=False))
trajectory("adam_amsgrad_wd", lambda W, b: torch.optim.Adam(
    [W, b], lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True, foreach=False))
trajectory("adam_maximize", lambda W, b: torch.optim.Adam(
    [W, b], lr=0.01, maximize=True, foreach=False))
trajectory("adamw_default", lambda W, b: torch.optim.AdamW([W, b], lr=0.01, foreach=False))
trajectory("adamw_amsgrad", lambda W, b: torch.optim.AdamW(
    [W, b], lr=0.05, betas=(0.85, 0.995), weight_decay=0.2, amsgrad=True, foreach=False))

trajectory("rmsprop_default", lambda W, b: torch.optim.RMSprop([W, b], lr=0.01, foreach=False))
trajectory("rmsprop_centered_momentum", lambda W, b: torch.optim.RMSprop(
    [W, b], lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.9, centered=True,
    foreach=False))
trajectory("rmsprop_momentum_maximize", lambda W, b: torch.optim.RMSprop(
    [W, b], lr=0.005, momentum=0.5, maximize=True, foreach=False))

trajectory("adagrad_default", lambda W, b: torch.optim.Adagrad([W, b], lr=0.1, foreach=False))
trajectory("adagrad_options", lambda W, b: torch.optim.Adagrad(
    [W, b], lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.5, eps=1e-6,
    foreach=False))


def lbfgs_rosenbrock(name, steps, **kw):
    p = R0.clone().requires_grad_()
    opt = torch.optim.LBFGS([p], **kw)
    rows, evals = [], []

    def closure():
        opt.zero_grad()
        loss = rosenbrock(p)
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
        rows.append(p.detach().clone())
        evals.append(opt.state[p]["func_evals"])
    emit_array("k_" + name, torch.stack(rows).flatten())
    emit_array("k_" + name + "_evals", evals)


def lbfgs_lsq(name, steps, **kw):
    W = W0.clone().requires_grad_()
    b = B0.clone().requires_grad_()
    opt = torch.optim.LBFGS([W, b], **kw)
    rows, evals = [], []

    def closure():
        opt.zero_grad()
        loss = lsq_loss(W, b)
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
        rows.append(torch.cat([W.detach().flatten(), b.detach().flatten()]))
        evals.append(opt.state[W]["func_evals"])
    emit_array("k_" + name, torch.stack(rows).flatten())
    emit_array("k_" + name + "_evals", evals)


lbfgs_rosenbrock("lbfgs_rosen_wolfe", 6, lr=1, max_iter=20, line_search_fn="strong_wolfe")
lbfgs_rosenbrock("lbfgs_rosen_fixed", 4, lr=0.002, max_iter=10, history_size=5)
lbfgs_lsq("lbfgs_lsq_wolfe", 3, lr=1, max_iter=5, history_size=3, line_search_fn="strong_wolfe")
lbfgs_lsq("lbfgs_lsq_fixed", 3, lr=0.5, max_iter=12, max_eval=7, history_size=2)


# --- schedulers: lr (and momentum) of each group after construction and after each step
def schedule(name, make_opt, make_sched, steps, momentum=None):
    opt = make_opt()
    sched = make_sched(opt)
    lrs, moms = [], []
    for k in range(steps + 1):
        if k > 0:
            opt.step()
            sched.step()
        for g in opt.param_groups:
            lrs.append(g["lr"])
            if momentum == "momentum":
                moms.append(g["momentum"])
            elif momentum == "betas":
                moms.append(g["betas"][0])
    emit_array("k_" + name, lrs)
    if momentum:
        emit_array("k_" + name + "_momentum", moms)


def two_groups_sgd():
    a = torch.zeros(2, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    return torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)


def adam_one():
    return torch.optim.Adam([torch.zeros(2, requires_grad=True)], lr=0.1)


S = torch.optim.lr_scheduler
schedule("sched_cosine", two_groups_sgd, lambda o: S.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
         30)
schedule("sched_onecycle_cos", two_groups_sgd,
         lambda o: S.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=20), 20, "momentum")
schedule("sched_onecycle_linear", adam_one,
         lambda o: S.OneCycleLR(o, max_lr=0.3, epochs=3, steps_per_epoch=5, pct_start=0.25,
                                anneal_strategy="linear", div_factor=10., final_div_factor=100.),
         15, "betas")
schedule("sched_onecycle_three", two_groups_sgd,
         lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=23, three_phase=True,
                                base_momentum=0.8, max_momentum=0.9), 23, "momentum")
schedule("sched_onecycle_nomom", adam_one,
         lambda o: S.OneCycleLR(o, max_lr=0.2, total_steps=12, cycle_momentum=False), 12)

print("// Generated by tests/data/optim/gen_optim_reference.py with PyTorch %s; do not edit."
      % torch.__version__)
print("#pragma once")
print("#include <vector>")
print("namespace optim_ref {")
print("\n".join(out))
print("}  // namespace optim_ref")
