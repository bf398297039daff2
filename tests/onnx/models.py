"""PyTorch models exported to ONNX for kiln's importer tests and the import benchmark: the same
architectures as kiln's zoo (ResNet-18 and MobileNetV2 as torchvision defines them, LeNet, an
MLP), a pre-norm transformer encoder block and small cases. Random weights (seeded), eval mode;
BatchNorm statistics are randomized so that folding them is tested.

    export(name, directory, opset) -> (model.onnx, x.npy, y.npy)   (y: PyTorch's output)"""
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), nn.ReLU6(),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.reshape(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return F.log_softmax(self.net(x), dim=1)


class TransformerBlock(nn.Module):
    """Pre-norm encoder block: multi-head attention written out (as BERT-style exports look:
    Shape/Gather/Reshape/Transpose/MatMul/Softmax), GELU (erf) MLP, LayerNorm."""

    def __init__(self, d=64, heads=4, vocab=1000, classes=10):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        x = self.embed(tokens)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        split = lambda z: z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(dim=1))


class PadSliceConcat(nn.Module):
    """Ops a CNN export rarely has: asymmetric pads, slices with steps, concat, average pooling
    without the padding counted, transposed conv, sigmoid gating, broadcasting."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)

    def forward(self, x):
        y = F.pad(x, (1, 2, 0, 1))
        y = self.conv(y)
        y = F.avg_pool2d(y, 3, 2, 1, count_include_pad=False)
        z = torch.cat([y[:, :, ::2, :], y[:, :, 1::2, :]], dim=1)
        z = self.up(z[:, :8]) * torch.sigmoid(z.mean(dim=(2, 3), keepdim=True)[:, :4])
        return torch.clamp(z, -0.5, 0.5) + x.mean(dim=(1, 2, 3), keepdim=True)


class VGGish(nn.Module):
    """VGG's pattern: 3x3 conv + ReLU stacks, max pooling, a dropout MLP head."""

    def __init__(self):
        super().__init__()
        cfg, layers, cin = [16, 16, "M", 32, 32, "M", 64, "M"], [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 128), nn.ReLU(),
                                  nn.Dropout(), nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.features(x))


class SqueezeNetFire(nn.Module):
    """SqueezeNet: ceil-mode max pooling and fire modules (squeeze 1x1, expand 1x1 | 3x3, concat),
    a conv classifier with global average pooling."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, stride=2)
        self.fires = nn.ModuleList([self._fire(32, 8, 32), self._fire(64, 8, 32)])
        self.classifier = nn.Conv2d(64, 10, 1)

    @staticmethod
    def _fire(cin, squeeze, expand):
        return nn.ModuleDict({"s": nn.Conv2d(cin, squeeze, 1), "e1": nn.Conv2d(squeeze, expand, 1),
                              "e3": nn.Conv2d(squeeze, expand, 3, padding=1)})

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.stem(x)), 3, 2, ceil_mode=True)
        for f in self.fires:
            s = F.relu(f["s"](x))
            x = torch.cat([F.relu(f["e1"](s)), F.relu(f["e3"](s))], 1)
        return torch.flatten(F.adaptive_avg_pool2d(F.relu(self.classifier(x)), 1), 1)


class DenseNetBlock(nn.Module):
    """DenseNet: pre-activation BN-ReLU-conv layers whose outputs concatenate, a transition with
    average pooling (BatchNormalization stays a separate op: it precedes its conv)."""

    def __init__(self, cin=16, growth=8, layers=3):
        super().__init__()
        self.stem = nn.Conv2d(3, cin, 3, padding=1, bias=False)
        self.layers = nn.ModuleList()
        for i in range(layers):
            c = cin + i * growth
            self.layers.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(),
                                             nn.Conv2d(c, growth, 3, padding=1, bias=False)))
        c = cin + layers * growth
        self.transition = nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False),
                                        nn.AvgPool2d(2))
        self.fc = nn.Linear(c // 2, 10)

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        x = self.transition(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LSTMClassifier(nn.Module):
    """The zoo's LSTM shape: tokens -> embedding -> LSTM (batch first) -> last step -> classes."""

    def __init__(self, vocab=1000, d=32, hidden=64, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, tokens):
        y, _ = self.lstm(self.embed(tokens))
        return self.fc(y[:, -1])


class BiGRU(nn.Module):
    """Two bidirectional GRU layers over [seq, batch, features] (ONNX GRU, linear_before_reset)."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(16, 24, num_layers=2, bidirectional=True)

    def forward(self, x):
        y, h = self.gru(x)
        return y.mean(dim=0) + h.sum(dim=0).repeat(1, 2)


MODELS = {
    "resnet18": (ResNet18, (1, 3, 224, 224), 13),
    "mobilenet_v2": (MobileNetV2, (1, 3, 224, 224), 13),
    "lenet": (LeNet, (2, 1, 28, 28), 13),
    "mlp": (MLP, (4, 1, 28, 28), 13),
    "transformer": (TransformerBlock, (2, 16), 17),
    "pad_slice_concat": (PadSliceConcat, (1, 4, 12, 10), 13),
    "vgg": (VGGish, (2, 3, 32, 32), 13),
    "squeezenet": (SqueezeNetFire, (1, 3, 33, 33), 13),
    "densenet": (DenseNetBlock, (2, 3, 16, 16), 13),
    "lstm": (LSTMClassifier, (2, 12), 13),
    "bigru": (BiGRU, (7, 3, 16), 13),
}


def build(name):
    torch.manual_seed(0)
    cls, shape, opset = MODELS[name]
    m = cls().eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    return m, shape, opset


def export(name, directory, opset=None):
    m, shape, default_opset = build(name)
    torch.manual_seed(1)
    if name in ("transformer", "lstm"):
        x = torch.randint(0, 1000, shape)
    else:
        x = torch.randn(shape)
    with torch.no_grad():
        y = m(x)
    path = os.path.join(directory, name + ".onnx")
    torch.onnx.export(m, x, path, opset_version=opset or default_opset, input_names=["x"],
                      output_names=["y"], do_constant_folding=True)
    np.save(os.path.join(directory, name + "_x.npy"), x.numpy())
    np.save(os.path.join(directory, name + "_y.npy"), y.numpy())
    return path
