"""Every module, function and method tools/torch2kiln.py maps, in one small model (the models tests export
it as `op_zoo` at 32x32 and check it as the torchvision models: emu --check, and kiln ref vs PyTorch f64).
Each stage keeps a residual path so that no mapping can vanish into a saturated activation."""
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.convnext import LayerNorm2d
from torchvision.ops import Conv2dNormActivation, Permute, SqueezeExcitation, StochasticDepth


class Convs(nn.Module):
    """Conv2d in its forms: stride, tuple and 'same' padding, dilation, groups, depthwise, no bias; a grouped
    ConvTranspose2d with output_padding."""

    def __init__(self):
        super().__init__()
        self.stem = Conv2dNormActivation(3, 16, 3, stride=2, norm_layer=lambda c: nn.BatchNorm2d(c, eps=1e-3))
        self.grouped = nn.Conv2d(16, 16, 3, padding="same", dilation=2, groups=4, bias=False)
        self.bn_plain = nn.BatchNorm2d(16, affine=False)
        self.depthwise = nn.Conv2d(16, 16, 5, padding=(2, 2), groups=16)
        self.wide = nn.Conv2d(16, 16, (1, 3), padding=(0, 1))
        self.even = nn.Conv2d(16, 16, 4, padding="same")  # odd total padding: [1, 1, 2, 2]
        self.se = SqueezeExcitation(16, 4)
        self.up = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1, groups=2)  # H -> 2H
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.down(torch.tanh(self.up(x)))
        x = x + F.relu6(self.bn_plain(self.grouped(x)))
        x = x + F.hardswish(self.depthwise(x))
        x = x + torch.sigmoid(self.wide(x)) - 0.5
        x = F.relu(self.se(self.even(x)), inplace=True) + x
        return x


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleList([
            nn.ReLU(), nn.ReLU6(), nn.Hardswish(), nn.Hardsigmoid(), nn.SiLU(), nn.Sigmoid(), nn.Tanh(),
            nn.GELU(), nn.GELU(approximate="tanh"), nn.LeakyReLU(0.2), nn.ELU(0.5),
            nn.Softplus(beta=2, threshold=3), nn.Mish(), nn.Hardtanh(-0.5, 0.5)])

    def forward(self, x):
        y = x
        for act in self.acts:  # a sum, not a chain: f16 errors stay small enough for emu --check
            y = y + 0.1 * act(x)
        x = y
        x = x + F.gelu(x, approximate="tanh") * 0.25 + F.silu(x) / 4 + F.leaky_relu(x, 0.1) * 0.1
        x = 1 - torch.clamp(x, min=-2.0, max=2.0) + torch.tanh(x).mul(0.5) + torch.div(x, 3.0)
        return x.sub(F.softplus(x, beta=0.5)) * 0.5 + F.elu(x)


class Pools(nn.Module):
    """16x16 in: max and average pools (padding, ceil_mode, count_include_pad), adaptive pools as pools
    and as nearest upsampling, interpolation, concatenation."""

    def __init__(self):
        super().__init__()
        self.max = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.avg = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.avg_pad = nn.AvgPool2d(3, stride=2, ceil_mode=True)  # the last window is clipped
        self.adaptive = nn.AdaptiveAvgPool2d((4, 4))
        self.grow = nn.AdaptiveAvgPool2d(8)
        self.adaptive_max = nn.AdaptiveMaxPool2d((2, 4))
        self.up = nn.Upsample(scale_factor=2, mode="bilinear")

    def forward(self, x):
        a, b, c = self.max(x), self.avg(x), self.avg_pad(x)
        y = torch.cat([a, b, c], dim=1)  # 8x8
        y = y + self.grow(self.adaptive(y)) + F.interpolate(F.max_pool2d(y, 2), scale_factor=2.0)
        z = self.up(F.avg_pool2d(y, 2, 2)) + F.adaptive_avg_pool2d(y, 8)
        w = F.interpolate(self.adaptive_max(z), size=(8, 8), mode="bilinear", align_corners=True)
        return torch.concat([z, w], dim=-3)


class Tokens(nn.Module):
    """NHWC blocks: torchvision Permute, LayerNorm, Linear, transposes, ConvNeXt's LayerNorm2d, GroupNorm."""

    def __init__(self, c):
        super().__init__()
        self.to_nhwc, self.to_nchw = Permute([0, 2, 3, 1]), Permute([0, 3, 1, 2])
        self.ln = nn.LayerNorm(c, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(c, 2 * c), nn.Linear(2 * c, c, bias=False)
        self.ln2d = LayerNorm2d(c)
        self.gn = nn.GroupNorm(4, c)
        self.ln_hw = nn.LayerNorm([8, 8])
        self.drop, self.sd, self.id = nn.Dropout(0.3), StochasticDepth(0.2, "row"), nn.Identity()

    def forward(self, x):
        t = self.fc2(F.gelu(self.fc1(self.ln(self.to_nhwc(x)))))
        x = x + self.sd(self.to_nchw(self.drop(t)))
        x = self.gn(self.ln2d(x)) + self.ln_hw(x).transpose(2, 3).permute(0, 1, 3, 2)
        return self.id(F.dropout(x, 0.5, training=self.training))


class Pieces(nn.Module):
    """Splitting and indexing: chunk, split, tuple unpacking, a channel shuffle (5-D view and transpose),
    integer and strided slices, unsqueeze, expand, swapaxes."""

    def forward(self, x):
        a, b = torch.chunk(x, 2, dim=1)
        first, rest = x.split([32, 64], dim=1)
        x = torch.cat([b, a], 1) + torch.cat([rest, first], dim=1)
        n, c, h, w = x.shape
        shuffled = x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        corner = torch.unsqueeze(x[:, :, 0, -1], -1).unsqueeze(-1).expand(-1, -1, h, w)
        even = x[:, ::2]
        return (shuffled + x[:, :, 2:3, :] + torch.cat([even, even], 1) + corner + torch.swapaxes(x, 2, 3)) / 5


class Head(nn.Module):
    def __init__(self, c, classes=10):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        g = x.mean((2, 3), keepdim=True)
        v = self.flatten(g) + x.mean([-1, -2]) + torch.flatten(F.adaptive_max_pool2d(x, 1), 1)
        logits = self.fc(v.reshape(v.shape[0], -1))
        return torch.softmax(logits, dim=-1) + logits


class OpZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs, self.acts, self.pools = Convs(), Activations(), Pools()
        self.tokens, self.pieces, self.head = Tokens(96), Pieces(), Head(96)

    def forward(self, x):
        return self.head(self.pieces(self.tokens(self.pools(self.acts(self.convs(x))))))


def build():
    return OpZoo()
