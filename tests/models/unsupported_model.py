"""A model kiln cannot run (tests/models/expect_unsupported.sh): a pixel shuffle, and torch.sort inside a
submodule; everything else in it is supported."""
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.sort(self.fc(x), dim=1)[0]  # (no tuple unpacking: fx on Python 3.11 cannot trace it)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3, padding=1)  # 32 channels shuffled into 8
        self.up = nn.PixelShuffle(2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = Head()

    def forward(self, x):
        x = self.up(torch.relu(self.conv(x)))
        return self.head(torch.flatten(self.pool(x), 1))


def build():
    return Net()
