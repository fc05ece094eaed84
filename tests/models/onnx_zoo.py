"""One small model with every PyTorch module whose ONNX export kiln imports beyond the torchvision models'
(tests/models/check_onnx.sh through tools/torch2onnx.py, ctest onnx.models.onnx_zoo): GroupNorm (exported as
InstanceNormalization on a reshape), LayerNorm (written out below opset 17), erf GELU, SiLU, Hardswish,
Hardsigmoid, ELU, LeakyReLU, Softplus, Mish, PReLU, nearest and bilinear upsampling, average pooling with
padding, ceil-mode max pooling, concat, softmax and a linear head."""
import torch
from torch import nn
import torch.nn.functional as F


class OnnxZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.prelu = nn.PReLU(16)
        self.ln = nn.LayerNorm(8)
        self.conv2 = nn.Conv2d(32, 16, 1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        x = F.gelu(self.gn(x))
        a = F.silu(x) + F.hardswish(x) * F.hardsigmoid(x)
        b = F.elu(x) - F.leaky_relu(x, 0.1) + F.softplus(x) + F.mish(x)
        x = torch.cat([a, self.prelu(b)], dim=1)
        x = F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)  # 32 -> 16
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)  # 16 -> 8
        x = self.ln(x)  # over W
        x = F.interpolate(x, scale_factor=2, mode="nearest") + F.interpolate(x, scale_factor=2, mode="bilinear")
        x = self.conv2(x).mean(dim=(2, 3))
        return torch.softmax(self.head(x), dim=-1)


def build():
    return OnnxZoo()
