"""A model zoo written for these benchmarks (no torchvision): small shapes that compile quickly on CPU.

``MODELS[name](batch)`` returns ``(module, example_inputs)``. Every model is
deterministic for a given seed; ``batch`` scales the runs.
"""

from __future__ import annotations

import random
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["MODELS", "make"]


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return F.relu(self.body(x) + self.skip(x))


class ResNet(nn.Module):
    """A ResNet-18-shaped residual network with narrow channels."""

    def __init__(self, width: int = 16, classes: int = 10):
        super().__init__()
        self.stem = conv_bn(3, width)
        layers, cin = [], width
        for i, cout in enumerate([width, width * 2, width * 4, width * 8]):
            layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.layers(self.stem(x)).mean((2, 3)))


class VGG(nn.Module):
    def __init__(self, cfg=(16, 16, "M", 32, 32, "M", 64, 64, 64, "M", 128, 128, 128, "M"), classes: int = 10):
        super().__init__()
        layers, cin = [], 3
        for c in cfg:
            if c == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers.append(conv_bn(cin, c))
                cin = c
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(cin * 2 * 2, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x):
        return self.head(self.features(x))


class AlexNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 24, 5, 2, 2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(24, 48, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(48, 64, 3, 1, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 2 * 2, 128), nn.ReLU(), nn.Linear(128, classes))

    def forward(self, x):
        return self.head(self.features(x))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int = 4):
        super().__init__()
        mid = cin * expand
        self.use_skip = stride == 1 and cin == cout
        self.body = nn.Sequential(conv_bn(cin, mid, 1), conv_bn(mid, mid, 3, stride, groups=mid),
                                  nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.body(x)
        return x + y if self.use_skip else y


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        cfg = [(16, 1), (24, 2), (24, 1), (32, 2), (32, 1), (64, 2), (64, 1)]
        layers, cin = [conv_bn(3, 16, 3, 1)], 16
        for cout, stride in cfg:
            layers.append(InvertedResidual(cin, cout, stride))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class DenseBlock(nn.Module):
    def __init__(self, cin: int, growth: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(conv_bn(cin + i * growth, growth) for i in range(layers))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, growth: int = 8, classes: int = 10):
        super().__init__()
        self.stem = conv_bn(3, 16)
        blocks, cin = [], 16
        for i in range(3):
            blocks.append(DenseBlock(cin, growth, 4))
            cin += 4 * growth
            if i < 2:
                blocks += [conv_bn(cin, cin // 2, 1), nn.AvgPool2d(2)]
                cin //= 2
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class InceptionBlock(nn.Module):
    """Four parallel branches of different cost, concatenated: the irregular shape that reordering exploits."""

    def __init__(self, cin: int, c: int):
        super().__init__()
        self.b1 = conv_bn(cin, c, 1)
        self.b2 = nn.Sequential(conv_bn(cin, c // 2, 1), conv_bn(c // 2, c, 3))
        self.b3 = nn.Sequential(conv_bn(cin, c // 4, 1), conv_bn(c // 4, c // 2, 3), conv_bn(c // 2, c // 2, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv_bn(cin, c // 2, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class Inception(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = conv_bn(3, 32)
        self.blocks = nn.Sequential(InceptionBlock(32, 16), nn.MaxPool2d(2), InceptionBlock(48, 32), nn.MaxPool2d(2),
                                    InceptionBlock(96, 32))
        self.head = nn.Linear(96, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class RandWire(nn.Module):
    """A random DAG of conv nodes (RandWire-style, Xie et al. 2019): each node sums a random set of earlier nodes."""

    def __init__(self, nodes: int = 12, width: int = 16, seed: int = 0, classes: int = 10):
        super().__init__()
        rng = random.Random(seed)
        self.stem = conv_bn(3, width)
        self.inputs = [sorted(rng.sample(range(i + 1), k=min(i + 1, rng.randint(1, 3)))) for i in range(nodes)]
        self.ops = nn.ModuleList(conv_bn(width, width) for _ in range(nodes))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        outs = [self.stem(x)]
        for op, ins in zip(self.ops, self.inputs):
            total = outs[ins[0]]
            for j in ins[1:]:
                total = total + outs[j]
            outs.append(op(total))
        used = {j for ins in self.inputs for j in ins}
        leaves = [o for i, o in enumerate(outs) if i not in used]
        return self.head(torch.stack(leaves).mean(0).mean((2, 3)))


class UNet(nn.Module):
    def __init__(self, width: int = 8):
        super().__init__()
        self.down1, self.down2, self.mid = conv_bn(3, width), conv_bn(width, width * 2), conv_bn(width * 2, width * 4)
        self.up2, self.dec2 = nn.ConvTranspose2d(width * 4, width * 2, 2, 2), conv_bn(width * 4, width * 2)
        self.up1, self.dec1 = nn.ConvTranspose2d(width * 2, width, 2, 2), conv_bn(width * 2, width)
        self.out = nn.Conv2d(width, 2, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        m = self.mid(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], 1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], 1))
        return self.out(u1)


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 64, layers: int = 2, context: int = 32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*(TransformerBlock(dim) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


class MLP(nn.Module):
    def __init__(self, dims=(128, 256, 256, 10)):
        super().__init__()
        layers = []
        for a, b in zip(dims, dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.net(x)


def _image(model: Callable[[], nn.Module], size: int = 32):
    return lambda batch: (model(), (torch.randn(batch, 3, size, size),))


MODELS: dict[str, Callable[[int], tuple[nn.Module, tuple]]] = {
    "resnet": _image(ResNet),
    "vgg": _image(VGG),
    "alexnet": _image(AlexNet),
    "mobilenetv2": _image(MobileNetV2),
    "densenet": _image(DenseNet),
    "inception": _image(Inception),
    "randwire": _image(RandWire),
    "unet": _image(UNet),
    "transformer": lambda batch: (TransformerBlock(), (torch.randn(batch, 32, 64),)),
    "gpt": lambda batch: (GPT(), (torch.randint(0, 256, (batch, 32)),)),
    "mlp": lambda batch: (MLP(), (torch.randn(batch, 128),)),
}


def make(name: str, batch: int = 2, seed: int = 0) -> tuple[nn.Module, tuple]:
    """A model and example inputs, seeded so every run builds the same weights and data."""
    torch.manual_seed(seed)
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name](batch)
