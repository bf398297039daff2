#!/usr/bin/env python3
"""Emits model_reference.inc for kiln's model-zoo tests, using PyTorch 1.13.

torchvision is not installed here, so ResNet and MobileNetV2 are transcribed from torchvision
0.14's source (models/resnet.py, models/mobilenetv2.py, ops/misc.py Conv2dNormActivation) below.
For each model the file records every state_dict entry's name and shape (1000 classes), and the
float64 logits (10 classes, eval mode) for deterministic weights and inputs that the C++ test
regenerates with the same formulas (det_fill), so no weights need to be stored.

kiln's TransformerClassifier (frontend/src/models/sequence.cpp, not a torchvision model) is built
from torch.nn's own layers below and recorded the same way at its test's size (3 classes), on
integer tokens with padding (det_tokens).

Run: /usr/bin/python3 tests/data/nn/gen_model_reference.py > tests/data/nn/model_reference.inc
"""
import math

import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)


# ---------------------------------------------------------------- torchvision ResNet (v1.5)
def conv3x3(i, o, stride=1):
    return nn.Conv2d(i, o, 3, stride=stride, padding=1, bias=False)


def conv1x1(i, o, stride=1):
    return nn.Conv2d(i, o, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        width = planes
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# ---------------------------------------------------------------- torchvision MobileNetV2
def _make_divisible(v, divisor, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, groups=1):
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups,
                      bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1))
        layers.extend([
            Conv2dNormActivation(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ])
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.0, dropout=0.2):
        super().__init__()
        input_channel = 32
        last_channel = 1280
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
                   [6, 160, 3, 2], [6, 320, 1, 1]]
        input_channel = _make_divisible(input_channel * width_mult, 8)
        self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), 8)
        features = [Conv2dNormActivation(3, input_channel, stride=2)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, 8)
            for i in range(n):
                stride = s if i == 0 else 1
                features.append(InvertedResidual(input_channel, output_channel, stride, t))
                input_channel = output_channel
        features.append(Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout),
                                        nn.Linear(self.last_channel, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


# ---------------------------------------------------------------- LeNet-5 as specified for kiln
class LeNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


# ---------------------------------------------------------------- kiln's TransformerClassifier
class TransformerClassifier(nn.Module):
    """frontend/src/models/sequence.cpp: token embedding plus a learned positional embedding,
    batch-first pre-norm GELU encoder layers with the padding tokens masked as keys, a final
    LayerNorm, the mean over the non-padded positions, a linear head."""

    def __init__(self, vocab_size, num_classes, d_model, nhead, num_layers, dim_feedforward,
                 max_len, padding_idx):
        super().__init__()
        self.padding_idx = padding_idx
        self.pos_embedding = nn.Parameter(torch.zeros(max_len, d_model))
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.1,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(num_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens) + self.pos_embedding[:tokens.shape[1]]
        pad = tokens == self.padding_idx
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=pad)
        x = self.norm(x)
        keep = (~pad).to(x.dtype).unsqueeze(-1)  # (N, T, 1)
        return self.head((x * keep).sum(1) / keep.sum(1).clamp(min=1.0))


# ---------------------------------------------------------------- deterministic fill (mirrored
# in tests/frontend/test_models.cpp)
def det_fill(key, k, shape):
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.float64)
    if key.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.int64)
    if key.endswith("running_var"):
        v = 1.0 + 0.25 * (1.0 + torch.sin(0.7 * i + 0.3 * k))
    elif key.endswith("running_mean"):
        v = 0.1 * torch.sin(0.9 * i + 0.5 * k)
    elif len(shape) == 1 and key.endswith("weight"):
        v = 1.0 + 0.1 * torch.sin(0.37 * i + 0.11 * k)
    elif len(shape) == 1:
        v = 0.1 * torch.sin(0.37 * i + 0.11 * k + 0.5)
    else:
        fan_in = n // shape[0]
        v = math.sqrt(3.0 / fan_in) * torch.sin(0.37 * i + 0.11 * k + 0.5)
    return v.reshape(shape)


def det_input(shape):
    n = 1
    for s in shape:
        n *= s
    return torch.sin(0.013 * torch.arange(n, dtype=torch.float64) + 0.1).reshape(shape)


def det_tokens(shape, vocab_size, padding_idx):
    """(N, T) tokens in [1, vocab_size - 1]; row n is padded after T - 2 - 4n tokens."""
    n_rows, t_len = shape
    tok = torch.full(shape, padding_idx, dtype=torch.int64)
    for n in range(n_rows):
        for t in range(t_len - 2 - 4 * n):
            tok[n, t] = 1 + (7 * n + 5 * t + 3) % (vocab_size - 1)
    return tok


out = []
out.append("// Generated by tests/data/nn/gen_model_reference.py with PyTorch "
           + torch.__version__ + " - do not edit.")
out.append("#pragma once")
out.append("#include <cstdint>")
out.append("#include <vector>")
out.append("namespace model_ref {")
out.append("struct Entry {")
out.append("  const char* name;")
out.append("  std::vector<int64_t> shape;")
out.append("};")
out.append("struct Model {")
out.append("  const char* name;")
out.append("  int64_t num_parameters;")
out.append("  std::vector<Entry> state;  // 1000 classes (LeNet: 10, transformer: 3)")
out.append("  std::vector<int64_t> input_shape;")
out.append("  // 10 classes (transformer: 3), eval, det_fill weights, det_input (transformer:")
out.append("  // det_tokens)")
out.append("  std::vector<double> logits;")
out.append("};")
out.append("inline const std::vector<Model>& models() {")
out.append("  static const std::vector<Model> m = {")

cases = [
    ("resnet18", lambda c: ResNet(BasicBlock, [2, 2, 2, 2], c), [1, 3, 64, 64]),
    ("resnet50", lambda c: ResNet(Bottleneck, [3, 4, 6, 3], c), [1, 3, 32, 32]),
    ("mobilenet_v2", lambda c: MobileNetV2(c), [1, 3, 32, 32]),
    ("lenet", lambda c: LeNet(c), [2, 1, 28, 28]),
]
for name, make, in_shape in cases:
    full = make(10 if name == "lenet" else 1000)
    nparams = sum(p.numel() for p in full.parameters())
    entries = ", ".join('{"%s", {%s}}' % (k, ", ".join(str(s) for s in v.shape))
                        for k, v in full.state_dict().items())
    small = make(10)
    sd = small.state_dict()
    new_sd = {k: det_fill(k, idx, list(v.shape)) for idx, (k, v) in enumerate(sd.items())}
    small.load_state_dict(new_sd)
    small.eval()
    with torch.no_grad():
        logits = small(det_input(in_shape))
    vals = ", ".join(repr(float(x)) for x in logits.reshape(-1).tolist())
    out.append('    {"%s", %d, {%s}, {%s}, {%s}},' %
               (name, nparams, entries, ", ".join(str(s) for s in in_shape), vals))

# TransformerClassifierOptions{20, 3} with d_model 16, nhead 2, 2 layers, dim_feedforward 32,
# max_len 12, padding_idx 0, as in test_models.cpp.
tc = dict(vocab_size=20, num_classes=3, d_model=16, nhead=2, num_layers=2, dim_feedforward=32,
          max_len=12, padding_idx=0)
tok_shape = [2, 10]
net = TransformerClassifier(**tc)
sd = net.state_dict()
entries = ", ".join('{"%s", {%s}}' % (k, ", ".join(str(s) for s in v.shape)) for k, v in sd.items())
nparams = sum(p.numel() for p in net.parameters())
net.load_state_dict({k: det_fill(k, idx, list(v.shape)) for idx, (k, v) in enumerate(sd.items())})
net.eval()
tokens = det_tokens(tok_shape, tc["vocab_size"], tc["padding_idx"])
# With grad enabled the encoder layers take their reference (Python) path, not the fused
# _transformer_encoder_layer_fwd; the fused path must agree.
logits = net(tokens).detach()
with torch.no_grad():
    assert torch.allclose(net(tokens), logits, rtol=0, atol=1e-12)
vals = ", ".join(repr(float(x)) for x in logits.reshape(-1).tolist())
out.append('    {"%s", %d, {%s}, {%s}, {%s}},' %
           ("transformer_classifier", nparams, entries, ", ".join(str(s) for s in tok_shape), vals))
out.append("  };")
out.append("  return m;")
out.append("}")
out.append("}  // namespace model_ref")
print("\n".join(out))
